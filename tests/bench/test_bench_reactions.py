"""What other services do with bench verdicts: fleet moves the instance, the provisioner's host history learns.

The chains are real: suite reports reach the bench service over HTTP, fleet asks for the verdict when a worker
registers, bench publishes it, fleet and the provisioner consume it from JetStream; the provisioner launches
on the vast.ai simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from redis.asyncio import Redis

from services.bench.app import build as build_bench
from services.fleet.app import build as build_fleet
from services.fleet.config import FleetSettings
from services.provisioner.app import SERVICE as PROVISIONER
from services.provisioner.app import assemble
from services.provisioner.host_history import IncidentKind
from services.provisioner.settings import ProvisionerSettings
from services.provisioner.store import ProvisionerStore
from shared.bus import event_headers
from shared.clock import SimulatedClock
from shared.contract import (
    BenchResult,
    Event,
    FailureReason,
    InstanceObserved,
    InstanceState,
    InstanceTransitioned,
    LaunchInstances,
    TaskEvent,
)
from shared.contract.commands import LaunchReason
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import DEMAND, INSTANCES, StreamSpec
from sim.vast.scenario import Scenario
from tests.bench.service_helpers import (
    bench_settings,
    collect,
    gpu_request,
    label_for,
    over_http,
    post_report,
    request_bench,
    suite_report,
    token_for,
)
from tests.helpers import eventually
from tests.sim_vast.harness import StartVast, start_vast

__all__ = ["start_vast"]  # the fixture


async def publish_to(js: JetStreamContext, subject: str, event: Event, spec: StreamSpec, settings: Settings) -> None:
    stream = spec.name(settings.subjects)
    await js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)


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

    config = ProvisionerSettings(min_cuda=12.0, bench_url="http://bench.test", report_token="report-token-for-tests")
    provisioner = assemble(ServiceContext(PROVISIONER, settings, sim_clock), config)
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
                labels = {i: known[i].label for i in (slow_id, broken_id)}
                for instance_id, label in labels.items():
                    request = gpu_request(instance_id, sim_clock.now(), gpu_model="RTX 4090", label=label)
                    await request_bench(js, settings, request)
                half_speed = suite_report(slow_id, 0.5, gpu_name="NVIDIA GeForce RTX 4090")
                erroring = suite_report(
                    broken_id, 1.0, ["matmul_bf16: CUDA error: unspecified launch failure"], "RTX 4090"
                )
                # each with its own machine's token, as the provisioner created it
                slow_token, broken_token = (token_for(i, labels[i]) for i in (slow_id, broken_id))
                assert (await post_report(bench_url, half_speed, token=slow_token)).status_code == 202
                assert (await post_report(bench_url, erroring, token=broken_token)).status_code == 202
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


async def test_fleet_asks_for_verdicts_and_moves_its_instances_on_them(
    settings: Settings, nc: NatsClient, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    transitions = await collect(nc, settings.subjects.fleet_instance_all, InstanceTransitioned)
    fleet = build_fleet(ServiceContext("fleet", settings, sim_clock), FleetSettings(tick_s=5))
    bench = build_bench(ServiceContext("bench", settings, sim_clock), bench_settings())
    subjects = settings.subjects
    await fleet.start()
    try:
        async with over_http(bench) as bench_url:
            # The suites report at container start, before any worker registers.
            reports = {
                401: suite_report(401, 0.5, gpu_name="NVIDIA GeForce RTX 4090"),
                402: suite_report(402, 1.0, ["host_copy: CUDA error: an illegal memory access"], "RTX 4090"),
                403: suite_report(403, 1.0, gpu_name="NVIDIA GeForce RTX 4090"),
            }
            for report in reports.values():
                assert (await post_report(bench_url, report)).status_code == 202
            for instance_id in reports:
                observed = InstanceObserved(
                    occurred_at=sim_clock.now(),
                    source="provisioner",
                    instance_id=instance_id,
                    state=InstanceState.RUNNING,
                    gpu_model="RTX 4090",
                    price_usd_per_h=0.5,
                    label=label_for(instance_id),  # fleet passes the label on to bench with its request
                )
                await publish_to(js, subjects.provision_instance(InstanceState.RUNNING), observed, INSTANCES, settings)
                started = TaskEvent(
                    occurred_at=sim_clock.now(),
                    source="jobs",
                    kind="started",
                    task_id=f"t-{instance_id}",
                    worker_id=f"worker-{instance_id}",
                    instance_id=instance_id,
                )
                await publish_to(js, subjects.task("started"), started, DEMAND, settings)

            def settled() -> dict[int, InstanceTransitioned]:
                final = {InstanceState.BENCHMARKED, InstanceState.FAILED}
                moved = {t.instance_id: t for t in transitions if t.to_state in final}
                return moved if len(moved) == 3 else {}

            moved = await eventually(settled, timeout_s=20)
    finally:
        await fleet.stop()

    assert moved[401].to_state is InstanceState.BENCHMARKED and "degraded" in moved[401].detail
    assert moved[402].to_state is InstanceState.FAILED
    assert moved[402].failure_reason is FailureReason.BENCH_FAILED
    assert moved[403].to_state is InstanceState.BENCHMARKED and "pass" in moved[403].detail
