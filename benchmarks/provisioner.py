"""The provisioner: ranking speed, a launch's cost over HTTP, and what the host history saves on a bad market.

1. Ranking N offers by expected $/task with a host history, against sorting the same offers by price.
2. Single-instance launches through the provisioner's operations against the simulator over real HTTP (list,
   search, create, private Redis), against a bare create round trip on the same simulator.
3. A market where a few cheap hosts only have machines that get stuck loading: cycles of launch → wait 2.5 h →
   destroy (as stuck, or as idle), with the host history and with it wiped before every launch. Reports the
   share of rents on bad hosts and the money the ledger shows they cost.

    python -m benchmarks.provisioner [--offers 2000] [--launches 30] [--cycles 40]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from redis.asyncio import Redis

from benchmarks.common import write_result
from services.provisioner.host_history import HostHistory, Incident, IncidentKind
from services.provisioner.metrics import ProvisionerMetrics
from services.provisioner.operations import Provisioner
from services.provisioner.ranking import OfferConstraints, ThroughputKnowledge, rank
from services.provisioner.settings import DOCUMENTED_SPACING_S, ProvisionerSettings
from services.provisioner.store import ProvisionerStore
from services.provisioner.vast_client import VastClient
from services.provisioner.vast_models import VastOffer
from shared.clock import SimulatedClock
from shared.contract import (
    DestroyInstance,
    InstanceObserved,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    ProvisionResult,
    RemovalReason,
    VastAccountObserved,
)
from shared.settings import Settings
from sim.infra import RedisServer
from sim.vast.runner import serving
from sim.vast.scenario import Endpoint, Fate, OfferSpec, Scenario
from sim.vast.server import VastSimulator

NAME = "provisioner"
KEY = "bench-key"
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
MODELS = ("RTX 4090", "RTX 5090", "RTX 3090")
NO_WAITS = dict.fromkeys(DOCUMENTED_SPACING_S, 0.0)  # the stand-in has no rate limits to space calls for
BENCH_CONFIG = ProvisionerSettings(
    spacing_s=NO_WAITS,
    rate_limited_wait_s=NO_WAITS,
    backoff_initial_s=0.0,
    backoff_max_s=0.0,
    allowed_gpu_models=list(MODELS),
    min_reliability=0.9,
    min_cuda=12.0,
    min_disk_gb=20.0,
    disk_gb=20.0,
    bench_url="http://bench.invalid:8000",  # the simulated machines run nothing
    report_token="bench-report-token",
)
STUCK_AFTER_S = 2.5 * 3600  # past the 1-2 h startup: still loading means stuck
BAD_HOSTS, GOOD_HOSTS, MACHINES_PER_HOST = 5, 15, 3
BAD_HOST_DISCOUNT = 0.92  # bad hosts undercut the rest a little, so price alone picks them first


class _Quiet:
    async def instance(self, event: InstanceObserved) -> None:
        return None

    async def result(self, event: ProvisionResult) -> None:
        return None

    async def account(self, event: VastAccountObserved) -> None:
        return None


def _offers(n: int, rng: random.Random) -> list[VastOffer]:
    return [
        VastOffer(
            id=i,
            gpu_name=rng.choice(MODELS),
            dph_total=rng.uniform(0.2, 0.8),
            machine_id=10_000 + i,
            host_id=1_000 + i // 3,
            reliability2=rng.uniform(0.9, 1.0),
            verified=True,
            cuda_max_good=12.8,
            disk_space=500,
        )
        for i in range(n)
    ]


def ranking_speed(n_offers: int, repeats: int = 20) -> dict[str, float]:
    rng = random.Random(1)
    offers = _offers(n_offers, rng)
    history = HostHistory()
    for i in range(500):
        offer = rng.choice(offers)
        at = START - timedelta(hours=rng.uniform(0, 200))
        history.record(Incident(at=at, kind=IncidentKind.VAST_ERROR, instance_id=i, host_id=offer.host_id,
                                machine_id=offer.machine_id))  # fmt: skip
    constraints = OfferConstraints(allowed_gpu_models=MODELS, max_price_usd_per_h=1.0, min_reliability=0.9)
    knowledge = ThroughputKnowledge()

    def best_of(run: Any) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return min(times)

    ranked_s = best_of(lambda: rank(offers, constraints, knowledge, history, START))
    sorted_s = best_of(lambda: sorted(offers, key=lambda o: o.dph_total))
    return {
        "offers": n_offers,
        "incidents": len(history.incidents),
        "rank_us_per_offer": ranked_s / n_offers * 1e6,
        "reference_sort_by_price_us_per_offer": sorted_s / n_offers * 1e6,
    }


def _provisioner(client: VastClient, redis: Redis, clock: SimulatedClock, settings: Settings) -> Provisioner:
    return Provisioner(
        client=client,
        store=ProvisionerStore(redis, f"bench:{uuid.uuid4().hex}"),
        clock=clock,
        settings=settings,
        config=BENCH_CONFIG,
        metrics=ProvisionerMetrics(CollectorRegistry()),
        publisher=_Quiet(),
    )


def _launch(key: str, clock: SimulatedClock) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=clock.now(), source="bench", idempotency_key=key, requested_by="policy", count=1,
        launch_priority="normal", reason=LaunchReason.BACKLOG,
    )  # fmt: skip


async def launch_cost(redis_url: str, launches: int) -> dict[str, float]:
    clock = SimulatedClock(START)
    market = [
        OfferSpec(offer_id=100 + i, gpu_model=MODELS[i % 3], price_usd_per_h=0.3 + i / 1000)
        for i in range(launches + 10)
    ]
    simulator = VastSimulator(Scenario.quiet(offers=market), KEY, clock)
    settings = Settings(redis_url=redis_url, budget_usd_per_h=1000.0, max_instances=1000)
    redis = Redis.from_url(redis_url)
    async with serving(simulator) as url:
        client = VastClient(url, SecretStr(KEY), clock=clock, settings=BENCH_CONFIG)
        provisioner = _provisioner(client, redis, clock, settings)
        launch_ms = []
        for n in range(launches):
            started = time.perf_counter()
            result = await provisioner.launch(_launch(f"bench-launch-{n:04d}", clock))
            launch_ms.append((time.perf_counter() - started) * 1000)
            assert result.outcome == "done", result
        calls = len(simulator.calls)
        bare_ms = []
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as bare:
            for offer_id in sorted(simulator.world.offers)[:10]:
                started = time.perf_counter()
                answer = await bare.put(f"/api/v0/asks/{offer_id}/", json={"image": "w", "disk": 20})
                bare_ms.append((time.perf_counter() - started) * 1000)
                assert answer.status_code == 200
        await client.aclose()
    await redis.aclose()
    return {
        "launches": launches,
        "launch_ms_median": statistics.median(launch_ms),
        "launch_ms_p90": sorted(launch_ms)[int(0.9 * (len(launch_ms) - 1))],
        "api_calls_per_launch": calls / launches,
        "instances_at_end": len(simulator.world.instances) - len(bare_ms),
        "reference_bare_create_ms_median": statistics.median(bare_ms),
    }


def _bad_market() -> tuple[list[OfferSpec], set[int]]:
    rng = random.Random(7)
    offers, bad_hosts = [], set()
    for host in range(BAD_HOSTS + GOOD_HOSTS):
        host_id = 500 + host
        bad = host < BAD_HOSTS
        if bad:
            bad_hosts.add(host_id)
        for m in range(MACHINES_PER_HOST):
            price = rng.uniform(0.48, 0.56) * (BAD_HOST_DISCOUNT if bad else 1.0)
            offers.append(
                OfferSpec(
                    offer_id=1000 + host * 10 + m,
                    machine_id=5000 + host * 10 + m,
                    host_id=host_id,
                    gpu_model="RTX 4090",
                    price_usd_per_h=round(price, 4),
                    reliability=0.98,
                    fate=Fate.STUCK_LOADING if bad else Fate.HEALTHY,
                )
            )
    return offers, bad_hosts


def _destroy(key: str, instance_id: int, reason: RemovalReason, clock: SimulatedClock) -> DestroyInstance:
    return DestroyInstance(
        occurred_at=clock.now(),
        source="bench",
        idempotency_key=key,
        requested_by="policy",
        instance_id=instance_id,
        reason=reason,
    )


async def history_value(redis_url: str, cycles: int, remember: bool) -> dict[str, float]:
    clock = SimulatedClock(START)
    offers, bad_hosts = _bad_market()
    simulator = VastSimulator(
        Scenario.quiet(offers=offers, startup={"startup_s": {"min": 3600, "max": 7200}}), KEY, clock
    )
    settings = Settings(redis_url=redis_url, budget_usd_per_h=100.0, max_instances=100)
    redis = Redis.from_url(redis_url)
    bad_rents = 0
    async with serving(simulator) as url:
        client = VastClient(url, SecretStr(KEY), clock=clock, settings=BENCH_CONFIG)
        provisioner = _provisioner(client, redis, clock, settings)
        for n in range(cycles):
            if not remember:
                await redis.delete(provisioner.store._key("host_history"))
            result = await provisioner.launch(_launch(f"bench-cycle-{n:04d}", clock))
            [instance_id] = result.instance_ids
            instance = simulator.world.instances[instance_id]
            bad_rents += instance.offer.host_id in bad_hosts
            clock.advance(STUCK_AFTER_S)
            await provisioner.reconcile()
            stuck = provisioner.known[instance_id].state is not InstanceState.RUNNING
            reason = RemovalReason.STUCK_LOADING if stuck else RemovalReason.IDLE
            await provisioner.destroy(_destroy(f"bench-destroy-{n:04d}", instance_id, reason, clock))
        await client.aclose()
    await redis.aclose()
    ledger = simulator.world.ledger(clock.now())
    # a stuck machine bills only storage (vast bills the GPU from running): the loss is the hours it held a slot
    lost_h = sum(e.storage_billed_s for e in ledger.entries if e.host_id in bad_hosts) / 3600
    return {
        "cycles": cycles,
        "bad_host_share_of_market": BAD_HOSTS / (BAD_HOSTS + GOOD_HOSTS),
        "rents_on_bad_hosts": bad_rents,
        "share_on_bad_hosts": bad_rents / cycles,
        "machine_hours_lost_on_stuck_machines": round(lost_h, 1),
        "usd_total": round(ledger.total_cost_usd, 2),
        "create_calls": len(simulator.calls_to(Endpoint.CREATE)),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    redis_server = RedisServer()
    redis_server.start()
    try:
        result: dict[str, Any] = {"ranking": ranking_speed(args.offers)}
        result["launch"] = await launch_cost(redis_server.url, args.launches)
        result["history"] = {
            "with_history": await history_value(redis_server.url, args.cycles, remember=True),
            "reference_without_history": await history_value(redis_server.url, args.cycles, remember=False),
        }
    finally:
        redis_server.close()
    return result


def report(result: dict[str, Any]) -> None:
    ranking, launch, history = result["ranking"], result["launch"], result["history"]
    print(f"ranking {ranking['offers']} offers, {ranking['incidents']} incidents in the history")
    print(f"  rank by expected $/task   {ranking['rank_us_per_offer']:8.2f} µs/offer")
    print(f"  reference: sort by price  {ranking['reference_sort_by_price_us_per_offer']:8.2f} µs/offer")
    print(f"launch of one instance over HTTP ({launch['launches']} launches)")
    median, p90, calls = launch["launch_ms_median"], launch["launch_ms_p90"], launch["api_calls_per_launch"]
    print(f"  provisioner launch        {median:8.2f} ms median, {p90:.2f} ms p90, {calls:.1f} API calls")
    print(f"  reference: bare create    {launch['reference_bare_create_ms_median']:8.2f} ms median")
    with_h, without = history["with_history"], history["reference_without_history"]
    print(f"stuck-host market ({with_h['bad_host_share_of_market']:.0%} of hosts bad and cheaper), "
          f"{with_h['cycles']} launch-wait-destroy cycles")  # fmt: skip
    for label, row in (("with host history", with_h), ("reference: no history", without)):
        rents, share, lost_h = (
            row["rents_on_bad_hosts"],
            row["share_on_bad_hosts"],
            row["machine_hours_lost_on_stuck_machines"],
        )
        print(f"  {label:24s} {rents:3d} rents on bad hosts ({share:.0%}), {lost_h:.1f} machine-hours stuck")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offers", type=int, default=2000)
    parser.add_argument("--launches", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=40)
    outcome = asyncio.run(main(parser.parse_args()))
    report(outcome)
    print(f"wrote {write_result(NAME, outcome)}")
