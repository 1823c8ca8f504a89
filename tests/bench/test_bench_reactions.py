"""What other services do with bench verdicts: the provisioner's host history learns from them.

The chain is real: the provisioner launches on the vast.ai simulator, the instance's suite report reaches the
bench service over HTTP, bench publishes its verdict, the provisioner consumes it from JetStream. (Fleet's
reaction, benchmarked or failed(bench_failed), is tested once the fleet service exists.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from redis.asyncio import Redis

from services.bench.app import build as build_bench
from services.provisioner.app import SERVICE as PROVISIONER
from services.provisioner.app import assemble
from services.provisioner.host_history import IncidentKind
from services.provisioner.settings import ProvisionerSettings
from services.provisioner.store import ProvisionerStore
from shared.clock import SimulatedClock
from shared.contract import BenchResult, LaunchInstances
from shared.contract.commands import LaunchReason
from shared.service import ServiceContext
from shared.settings import Settings
from sim.vast.scenario import Scenario
from tests.bench.service_helpers import (
    bench_settings,
    collect,
    gpu_request,
    over_http,
    post_report,
    request_bench,
    suite_report,
)
from tests.helpers import eventually
from tests.sim_vast.harness import StartVast, start_vast

__all__ = ["start_vast"]  # the fixture


@contextlib.asynccontextmanager
async def ticking(clock: SimulatedClock, step_s: float = 1.0, every_wall_s: float = 0.01) -> AsyncIterator[None]:
    """Let simulated time pass on its own: the vast client spaces its calls on the clock."""

    async def tick() -> None:
        while True:
            await clock.advance_and_settle(step_s)
            await asyncio.sleep(every_wall_s)

    task = asyncio.create_task(tick())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_degraded_and_a_failed_machine_reach_the_provisioners_host_history(
    settings: Settings, nc: NatsClient, js: JetStreamContext, sim_clock: SimulatedClock, start_vast: StartVast
) -> None:
    market = [{"gpu_model": "RTX 4090", "count": 4, "verified_share": 1.0, "reliability": {"min": 0.98, "max": 0.99}}]
    _, vast_url = await start_vast(Scenario.quiet(market=market))
    settings = settings.model_copy(update={"vast_api_url": vast_url})
    results = await collect(nc, settings.subjects.bench_result, BenchResult)

    provisioner = assemble(ServiceContext(PROVISIONER, settings, sim_clock), ProvisionerSettings())
    bench = build_bench(ServiceContext("bench", settings, sim_clock), bench_settings(report_timeout_s=1e7))
    store = ProvisionerStore(Redis.from_url(settings.redis_url), f"fleetpilot:{settings.subject_prefix}:{PROVISIONER}")
    await provisioner.app.start()
    try:
        async with ticking(sim_clock):
            launch = LaunchInstances(
                occurred_at=sim_clock.now(),
                source="test",
                idempotency_key="bench-reaction-1",
                requested_by="operator",
                count=2,
                launch_priority="normal",
                reason=LaunchReason.OPERATOR_REQUEST,
            )
            launched = await provisioner.operations.launch(launch)
            assert launched.outcome == "done", launched.detail
            slow_id, broken_id = launched.instance_ids
            known = await store.load_instances()
            slow_machine, broken_machine = known[slow_id].machine_id, known[broken_id].machine_id
            assert slow_machine is not None and broken_machine is not None

            async with over_http(bench) as bench_url:
                for instance_id in (slow_id, broken_id):
                    await request_bench(js, settings, gpu_request(instance_id, occurred_at=sim_clock.now()))
                half_speed = suite_report(slow_id, 0.5, gpu_name="NVIDIA GeForce RTX 4090")
                erroring = suite_report(
                    broken_id, 1.0, ["matmul_bf16: CUDA error: unspecified launch failure"], "RTX 4090"
                )
                assert (await post_report(bench_url, half_speed)).status_code == 202
                assert (await post_report(bench_url, erroring)).status_code == 202
                await eventually(lambda: len(results) == 2)

                async def learned() -> bool:
                    history = await store.load_history()
                    failed = [i for i in history.incidents if i.kind is IncidentKind.BENCH_FAILED]
                    return slow_machine in history.measured and any(i.machine_id == broken_machine for i in failed)

                await eventually(learned)
            history = await store.load_history()
    finally:
        await provisioner.app.stop()
        await store.redis.aclose()

    verdicts = {result.instance_id: result.verdict for result in results}
    assert verdicts == {slow_id: "degraded", broken_id: "fail"}
    assert abs(history.measured[slow_machine].ratio_to_reference - 0.5) < 1e-6  # cheap enough per unit may still win
    assert broken_machine not in history.measured  # a failed bench leaves an incident, not a throughput
