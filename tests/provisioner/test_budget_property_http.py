"""Property over real HTTP: whatever the commands and the market do, the simulator's ledger never shows more
committed $/h or more instances than the budget allows (the pure core has its own, larger property run)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from redis.asyncio import Redis

from services.provisioner.metrics import ProvisionerMetrics
from services.provisioner.operations import Provisioner
from services.provisioner.store import ProvisionerStore
from services.provisioner.vast_client import VastClient
from shared.clock import SimulatedClock
from shared.contract import (
    DestroyInstance,
    InstanceObserved,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    ProvisionResult,
    RemovalReason,
    StopInstance,
    VastAccountObserved,
)
from shared.settings import Settings
from sim.infra import RedisServer
from sim.vast.runner import serving
from sim.vast.scenario import Endpoint, OfferSpec, Scenario
from sim.vast.server import ScriptedFault, VastSimulator
from tests.provisioner.service_harness import NOW, QUIET
from tests.sim_vast.harness import API_KEY

MarketMove = str  # "still" | "take" (offers rented by others between search and rent) | "drift" | "errors"


@dataclass
class Recorder:
    instances: list[InstanceObserved] = field(default_factory=list)
    results: list[ProvisionResult] = field(default_factory=list)

    async def instance(self, event: InstanceObserved) -> None:
        self.instances.append(event)

    async def result(self, event: ProvisionResult) -> None:
        self.results.append(event)

    async def account(self, event: VastAccountObserved) -> None:
        return None


steps = st.lists(
    st.tuples(
        st.sampled_from(["launch", "launch", "stop", "destroy"]),
        st.integers(min_value=1, max_value=3),
        st.sampled_from(["normal", "emergency"]),
        st.sampled_from(["still", "still", "take", "drift", "errors"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # mostly within the price caps and able to afford something, so most examples rent (zero is the pure test's)
    prices=st.lists(st.floats(min_value=0.1, max_value=1.1), min_size=2, max_size=8),
    budget_usd_per_h=st.floats(min_value=0.5, max_value=3.0),
    max_instances=st.integers(min_value=1, max_value=5),
    sequence=steps,
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_the_ledger_never_shows_the_budget_exceeded(
    redis_server: RedisServer,
    prices: list[float],
    budget_usd_per_h: float,
    max_instances: int,
    sequence: list[tuple[str, int, str, MarketMove]],
    seed: int,
) -> None:
    opening = ("launch", 1, "normal", "still")  # something to stop, destroy and count against later
    asyncio.run(_run(redis_server.url, prices, budget_usd_per_h, max_instances, [opening, *sequence], seed))


async def _run(
    redis_url: str,
    prices: list[float],
    budget_usd_per_h: float,
    max_instances: int,
    sequence: list[tuple[str, int, str, MarketMove]],
    seed: int,
) -> None:
    clock = SimulatedClock(NOW)
    offers = [
        OfferSpec(offer_id=500 + i, gpu_model=("RTX 4090", "RTX 5090", "RTX 3090")[i % 3], price_usd_per_h=round(p, 3))
        for i, p in enumerate(prices)
    ]
    scenario = Scenario.quiet(
        seed=seed,
        offers=offers,
        dynamics={"price_drift_per_h": 0.3, "max_price_step": 0.01, "new_offers_per_h": 0, "taken_by_others_per_h": 0},
    )
    simulator = VastSimulator(scenario, API_KEY, clock)
    shared = Settings(
        redis_url=redis_url,
        budget_usd_per_h=budget_usd_per_h,
        max_instances=max_instances,
        vast_api_key=SecretStr(API_KEY),
    )
    redis = Redis.from_url(redis_url)
    async with serving(simulator) as url:
        client = VastClient(url, shared.vast_api_key, clock=clock, settings=QUIET)
        recorder = Recorder()
        provisioner = Provisioner(
            client=client,
            store=ProvisionerStore(redis, f"property:{uuid.uuid4().hex}"),
            clock=clock,
            settings=shared,
            config=QUIET,
            metrics=ProvisionerMetrics(CollectorRegistry()),
            publisher=recorder,
        )
        try:
            for n, (verb, count, priority, move) in enumerate(sequence):
                _move_market(simulator, clock, move)
                key = f"cmd-{n:04d}-{verb}"
                if verb == "launch":
                    await provisioner.launch(_launch(clock, key, count, priority))
                else:
                    live = sorted(i for i, k in provisioner.known.items() if k.state is not InstanceState.GONE)
                    if not live:
                        continue
                    target = live[count % len(live)]
                    fields = dict(
                        occurred_at=clock.now(), source="property", idempotency_key=key, requested_by="agent",
                        instance_id=target, reason=RemovalReason.IDLE,
                    )  # fmt: skip
                    if verb == "stop":
                        await provisioner.stop(StopInstance(**fields))
                    else:
                        await provisioner.destroy(DestroyInstance(**fields))
                simulator.api = simulator.api.model_copy(update={"server_error_rate": 0.0})
                ledger = simulator.world.ledger(clock.now())
                assert ledger.live_instances <= max_instances
                assert ledger.committed_usd_per_h <= budget_usd_per_h + 1e-6
        finally:
            await client.aclose()
    await redis.aclose()
    ledger = simulator.world.ledger(clock.now())
    event(f"instances rented: {min(len(ledger.entries), 3)}{'+' if len(ledger.entries) >= 3 else ''}")
    assert ledger.peak_instances <= max_instances
    assert ledger.peak_committed_usd_per_h <= budget_usd_per_h + 1e-6
    # and the provisioner's own view agrees with vast's about what exists
    assert {r.instance_id for r in recorder.instances if r.state is InstanceState.REQUESTED} == {
        e.instance_id for e in ledger.entries
    }


def _launch(clock: SimulatedClock, key: str, count: int, priority: str) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=clock.now(),
        source="property",
        idempotency_key=key,
        requested_by="agent",
        count=count,
        launch_priority=priority,
        reason=LaunchReason.BACKLOG,
    )


def _move_market(simulator: VastSimulator, clock: SimulatedClock, move: MarketMove) -> None:
    if move == "take":
        cheapest = sorted(simulator.world.offers.values(), key=lambda o: o.dph_base)[:2]
        ids = [o.offer_id for o in cheapest]
        simulator.faults.append(ScriptedFault(endpoint=Endpoint.SEARCH, kind="take_offers", offer_ids=ids))
    elif move == "drift":
        clock.advance(3600)
    elif move == "errors":
        simulator.api = simulator.api.model_copy(update={"server_error_rate": 0.3})
