"""The fleet service on a real nats-server and redis-server, at simulated time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from redis.exceptions import AuthenticationError

from services.fleet.app import build
from services.fleet.config import FleetSettings
from shared.bus import event_headers
from shared.clock import SimulatedClock
from shared.contract import (
    BenchRequest,
    BenchResult,
    DrainInstance,
    Event,
    FailureReason,
    FleetSnapshot,
    FleetSnapshotRequest,
    InstanceObserved,
    InstanceState,
    InstanceTransitioned,
    QueueDepth,
    QueueSnapshot,
    RemovalReason,
    TaskEvent,
    Trigger,
    TriggerReason,
)
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import BENCH, COMMANDS, DEMAND, INSTANCES, LATEST, TRIGGERS
from sim.infra import RedisServer
from tests.helpers import eventually

S = InstanceState
CONFIG = FleetSettings(tick_s=5)


@asynccontextmanager
async def running_fleet(settings: Settings, clock: SimulatedClock) -> AsyncIterator[ServiceContext]:
    ctx = ServiceContext("fleet", settings, clock)
    app = build(ctx, CONFIG)
    await app.start()
    try:
        yield ctx
    finally:
        await app.stop()


async def publish(js: JetStreamContext, subject: str, event: Event, stream: str) -> None:
    await js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)


class Bus:
    """What a test publishes to fleet and reads back from it."""

    def __init__(self, js: JetStreamContext, nc: NatsClient, settings: Settings, clock: SimulatedClock) -> None:
        self.js, self.nc, self.s, self.clock = js, nc, settings.subjects, clock

    async def observed(self, instance_id: int, state: InstanceState, **kwargs: object) -> None:
        event = InstanceObserved(
            occurred_at=self.clock.now(),
            source="provisioner",
            instance_id=instance_id,
            state=state,
            gpu_model="RTX 4090",
            price_usd_per_h=0.5,
            vast_actual_status=state.value,
            **kwargs,  # type: ignore[arg-type]
        )
        await publish(self.js, self.s.provision_instance(state), event, INSTANCES.name(self.s))

    async def task(self, instance_id: int, kind: str, task_id: str) -> None:
        event = TaskEvent(
            occurred_at=self.clock.now(),
            source="jobs",
            kind=kind,  # type: ignore[arg-type]
            task_id=task_id,
            worker_id=f"worker-{instance_id}",
            instance_id=instance_id,
        )
        await publish(self.js, self.s.task(event.kind), event, DEMAND.name(self.s))

    async def queue(self, pending: int) -> None:
        event = QueueSnapshot(
            occurred_at=self.clock.now(),
            source="jobs",
            queues=[QueueDepth(task_type="prove", pending=pending, running=0)],
        )
        await publish(self.js, self.s.queue, event, DEMAND.name(self.s))

    async def transition(self, state: InstanceState) -> InstanceTransitioned | None:
        try:
            msg = await self.js.get_last_msg(INSTANCES.name(self.s), self.s.fleet_instance(state))
        except NotFoundError:
            return None
        return InstanceTransitioned.model_validate_json(msg.data)

    async def trigger(self, priority: str, reason: TriggerReason) -> Trigger | None:
        try:
            msg = await self.js.get_last_msg(TRIGGERS.name(self.s), self.s.trigger(priority, reason))  # type: ignore[arg-type]
        except NotFoundError:
            return None
        return Trigger.model_validate_json(msg.data)

    async def ask_snapshot(self) -> FleetSnapshot:
        request = FleetSnapshotRequest(occurred_at=self.clock.now(), source="test")

        async def answer() -> FleetSnapshot | None:
            try:  # right after a start the responder's subscription may not have reached the server yet
                reply = await self.nc.request(self.s.fleet_snapshot, request.model_dump_json().encode(), timeout=5)
            except NoRespondersError:
                return None
            return FleetSnapshot.model_validate_json(reply.data)

        snapshot: FleetSnapshot = await eventually(answer)
        return snapshot

    async def state_of(self, instance_id: int) -> InstanceState | None:
        for line in (await self.ask_snapshot()).instances:
            if line.instance_id == instance_id:
                return line.state
        return None


async def test_a_machine_walks_its_lifecycle_over_the_bus(
    settings: Settings, js: JetStreamContext, nc: NatsClient, sim_clock: SimulatedClock
) -> None:
    bus = Bus(js, nc, settings, sim_clock)
    async with running_fleet(settings, sim_clock):
        await bus.observed(101, S.LOADING)
        sim_clock.advance(3600)
        await bus.observed(101, S.RUNNING, num_gpus=2)
        running = await eventually(lambda: bus.transition(S.RUNNING))
        assert (running.instance_id, running.from_state) == (101, S.LOADING)
        assert (await eventually(lambda: bus.trigger("p0", TriggerReason.INSTANCE_RUNNING))).instance_id == 101

        await bus.task(101, "started", "t1")
        await eventually(lambda: bus.transition(S.REGISTERED))
        request = await js.get_last_msg(BENCH.name(settings.subjects), settings.subjects.bench_request)
        asked = BenchRequest.model_validate_json(request.data)
        # judged against vast's listing: its GPU model and how many GPUs it is billed for
        assert (asked.instance_id, asked.gpu_model, asked.num_gpus) == (101, "RTX 4090", 2)

        verdict = BenchResult(
            occurred_at=sim_clock.now(), source="bench", instance_id=101, kind="gpu", device="cuda", verdict="pass"
        )
        await publish(js, settings.subjects.bench_result, verdict, BENCH.name(settings.subjects))
        await eventually(lambda: bus.transition(S.BENCHMARKED))
        sim_clock.advance(240)
        await bus.task(101, "completed", "t1")
        await eventually(lambda: bus.transition(S.PRODUCING))

        snapshot = await bus.ask_snapshot()
        [line] = snapshot.instances
        assert line.line.startswith("#101 2x RTX 4090 producing $0.50/h 1.1h up")
        assert snapshot.producing_instances == 1 and snapshot.spend_usd_per_h == 0.5

        drain = DrainInstance(
            occurred_at=sim_clock.now(),
            source="decider",
            idempotency_key="drain-101-a",
            requested_by="policy",
            instance_id=101,
            reason=RemovalReason.OVER_PROVISIONED,
        )
        await publish(js, settings.subjects.fleet_drain, drain, COMMANDS.name(settings.subjects))
        await eventually(lambda: bus.transition(S.DRAINING))

        # the periodic snapshot on LATEST shows the drain once the timer runs
        async def published() -> FleetSnapshot | None:
            await sim_clock.advance_and_settle(CONFIG.tick_s)
            msg = await js.get_last_msg(LATEST.name(settings.subjects), settings.subjects.fleet_snapshot_published)
            latest = FleetSnapshot.model_validate_json(msg.data)
            return latest if latest.counts_by_state.get(S.DRAINING) == 1 else None

        await eventually(published, interval_s=0.1)


async def test_a_restart_rebuilds_every_instance_once_and_keeps_judging_time_in_state(
    settings: Settings, js: JetStreamContext, nc: NatsClient, sim_clock: SimulatedClock
) -> None:
    bus = Bus(js, nc, settings, sim_clock)
    async with running_fleet(settings, sim_clock):
        for instance_id in (1, 2, 3):
            await bus.observed(instance_id, S.LOADING)
        await bus.observed(3, S.RUNNING)
        await eventually(lambda: bus.transition(S.RUNNING))
        await eventually(lambda: bus.state_of(2))

    async with running_fleet(settings, sim_clock):
        before = await bus.ask_snapshot()
        assert [(line.instance_id, line.state) for line in before.instances] == [
            (1, S.LOADING),
            (2, S.LOADING),
            (3, S.RUNNING),
        ]
        await bus.observed(2, S.LOADING)  # a repeated observation after the restart adds nothing
        await bus.observed(2, S.REQUESTED)  # and a backwards one is ignored
        await bus.queue(20)  # work is waiting, so a worker that never registers is broken, not idle
        sim_clock.advance(3 * 3600)

        async def all_failed() -> FleetSnapshot | None:
            await bus.queue(20)
            await sim_clock.advance_and_settle(CONFIG.tick_s)
            snapshot = await bus.ask_snapshot()
            return snapshot if snapshot.counts_by_state.get(S.FAILED) == 3 else None

        after = await eventually(all_failed, interval_s=0.1)
        assert len(after.instances) == 3
        states = {line.instance_id: (line.state, line.failure_reason) for line in after.instances}
        assert states == {
            1: (S.FAILED, FailureReason.STUCK_LOADING),
            2: (S.FAILED, FailureReason.STUCK_LOADING),
            3: (S.FAILED, FailureReason.NEVER_REGISTERED),
        }
        await eventually(lambda: bus.trigger("p0", TriggerReason.INSTANCE_FAILED))


async def test_silent_producers_with_tasks_queued_are_dead_and_raise_p0(
    settings: Settings, js: JetStreamContext, nc: NatsClient, sim_clock: SimulatedClock
) -> None:
    bus = Bus(js, nc, settings, sim_clock)
    async with running_fleet(settings, sim_clock):
        await bus.observed(7, S.RUNNING)
        await bus.task(7, "completed", "t0")
        await eventually(lambda: bus.transition(S.PRODUCING))

        async def dead() -> InstanceTransitioned | None:
            await bus.queue(59)
            await sim_clock.advance_and_settle(60)
            return await bus.transition(S.FAILED)

        failed = await eventually(dead, timeout_s=20, interval_s=0.1)
        assert failed.failure_reason == FailureReason.DEAD
        assert "59 tasks were queued" in failed.detail
        assert (await eventually(lambda: bus.trigger("p0", TriggerReason.ALL_PRODUCERS_SILENT))).instance_id is None
        assert (await eventually(lambda: bus.trigger("p0", TriggerReason.INSTANCE_DEAD))).instance_id == 7


async def test_a_completion_replayed_under_a_fresh_event_id_counts_once_and_is_counted_as_refused(
    settings: Settings, js: JetStreamContext, nc: NatsClient, sim_clock: SimulatedClock
) -> None:
    bus = Bus(js, nc, settings, sim_clock)
    async with running_fleet(settings, sim_clock) as ctx:
        await bus.observed(1, S.LOADING)
        await eventually(lambda: bus.state_of(1))
        for _ in range(3):  # Bus.task gives every event a fresh event id: the same task completed three times
            await bus.task(1, "completed", "t-1")

        def refused() -> float | None:
            labels = {"reason": "repeated_completion"}
            return ctx.metrics.registry.get_sample_value("fleetpilot_fleet_refused_task_events_total", labels)

        await eventually(lambda: refused() == 2)
        [line] = (await bus.ask_snapshot()).instances
        assert line.state is S.PRODUCING and line.tasks_completed == 1


async def test_fleet_started_before_its_redis_waits_for_it_and_says_so(
    settings: Settings, js: JetStreamContext, nc: NatsClient, sim_clock: SimulatedClock, redis_server: RedisServer
) -> None:
    """compose and k8s start Redis beside the services: fleet exited with a traceback when Redis was not up yet."""
    redis_server.stop()
    ctx = ServiceContext("fleet", settings, sim_clock)
    app = build(ctx, CONFIG)
    starting = asyncio.create_task(app.start())
    try:
        reasons = await eventually(lambda: ctx.unhealthy_reasons(connected=True))
        assert reasons == [f"waiting for Redis at {settings.redis_url} to read fleet's saved state"]
        assert not starting.done()
        redis_server.start()
        await asyncio.wait_for(starting, timeout=30)
        assert ctx.unhealthy_reasons(connected=True) == []
        bus = Bus(js, nc, settings, sim_clock)
        assert (await bus.ask_snapshot()).instances == []
    finally:
        await app.stop()


async def test_fleet_whose_redis_refuses_its_password_stops_instead_of_serving_healthy(
    settings: Settings, sim_clock: SimulatedClock, redis_server: RedisServer
) -> None:
    """Waiting cannot help a refused password: the process stops (as the entry point's stop_process does),
    where it kept serving /health healthy with no subscriber at all."""
    wrong = settings.model_copy(update={"redis_url": f"redis://nobody:wrong@127.0.0.1:{redis_server.port}/0"})
    app = build(ServiceContext("fleet", wrong, sim_clock), CONFIG)
    stopped: list[bool] = []
    app.stop_process = lambda: stopped.append(True)
    starting = asyncio.create_task(app.start())
    try:
        await eventually(lambda: stopped)
        assert isinstance(app.fatal_error, AuthenticationError)
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await app.stop()
