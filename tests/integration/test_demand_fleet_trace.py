"""A 24-hour trace of a job system and a provisioner, replayed through real NATS into demand and fleet at
simulated time, each service restarted mid-way; the final signal and fleet snapshot are checked against
values computed from the trace itself.

Compressed to run in seconds: a pipelined job system stepped every 30 s, events published in 15-minute
chunks; the simulated clock jumps to each chunk's end before its events are published (nothing arrives from
the future) and moves 15 s on once they are consumed, so each service's timer runs twice per chunk.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from services.demand.app import build as build_demand
from services.demand.config import DemandSettings
from services.fleet.app import build as build_fleet
from services.fleet.config import FleetSettings
from shared.bus import event_headers
from shared.clock import SimulatedClock
from shared.contract import (
    BenchResult,
    DemandSignal,
    DemandState,
    DrainInstance,
    Event,
    FailureReason,
    FleetSnapshot,
    FleetSnapshotRequest,
    InstanceObserved,
    InstanceState,
    QueueSnapshot,
    RemovalReason,
    TaskEvent,
)
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import BENCH, COMMANDS, DEMAND, INSTANCES, LATEST
from tests.demand.jobs import Jobs
from tests.helpers import eventually

S = InstanceState
T0 = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
END = T0 + timedelta(hours=24)
CHUNK = timedelta(minutes=15)
STEP_S = 30.0
DURABLES = {
    DEMAND: ["demand-tasks", "demand-queue", "fleet-tasks", "fleet-queue"],
    INSTANCES: ["fleet-instances"],
    BENCH: ["fleet-bench"],
    COMMANDS: ["fleet-drain"],
}
PRICES = {1001: 0.50, 1002: 0.43, 1003: 0.45, 1004: 0.35, 1005: 0.50, 1006: 0.54, 1007: 0.48, 1008: 0.52}
GPUS = {1001: "RTX 4090", 1002: "RTX 5090", 1004: "RTX 3090", 1006: "RTX 4090"}


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


@dataclass
class Trace:
    """Every message of the day, with the subject and stream it goes to, in time order."""

    messages: list[tuple[datetime, str, Event, str]] = field(default_factory=list)
    tasks: list[TaskEvent] = field(default_factory=list)
    last_queue: QueueSnapshot | None = None


def arrivals_per_h(moment: datetime) -> float:
    """A diurnal day: ~60/h at night, ~240/h in the afternoon."""
    hour = (moment - T0).total_seconds() / 3600
    return 150 + 90 * math.sin(2 * math.pi * (hour - 9) / 24)


def build_trace(settings: Settings) -> Trace:
    s = settings.subjects
    trace = Trace()
    demand_stream, instances_stream = DEMAND.name(s), INSTANCES.name(s)

    def observe(moment: datetime, instance_id: int, state: InstanceState, **kwargs: object) -> None:
        fields: dict[str, object] = {
            "price_usd_per_h": PRICES[instance_id],
            "gpu_model": GPUS.get(instance_id, "RTX 4090"),
            "vast_actual_status": {S.REQUESTED: None, S.GONE: None}.get(state, state.value),
        }
        fields.update(kwargs)
        event = InstanceObserved(
            occurred_at=moment,
            source="provisioner",
            instance_id=instance_id,
            state=state,
            **fields,  # type: ignore[arg-type]
        )
        trace.messages.append((moment, s.provision_instance(state), event, instances_stream))

    def bench(moment: datetime, instance_id: int, verdict: str) -> None:
        event = BenchResult(
            occurred_at=moment,
            source="bench",
            instance_id=instance_id,
            kind="gpu",
            device="cuda",
            verdict=verdict,  # type: ignore[arg-type]
        )
        trace.messages.append((moment, s.bench_result, event, BENCH.name(s)))

    # the provisioner's day
    observe(at(0), 1001, S.REQUESTED)
    observe(at(0) + timedelta(minutes=1), 1001, S.LOADING)
    observe(at(0) + timedelta(minutes=1), 1002, S.LOADING)
    observe(at(1), 1001, S.RUNNING)
    observe(at(1.5), 1002, S.RUNNING)
    observe(at(6), 1003, S.LOADING)  # never starts: stuck
    observe(at(8), 1004, S.RUNNING)
    observe(at(9), 1004, S.GONE)  # destroyed after its failed benchmark
    observe(at(10), 1003, S.GONE)  # destroyed after it was judged stuck
    observe(at(12), 1005, S.LOADING)
    observe(at(12.5), 1002, S.GONE)  # killed while producing
    observe(at(13), 1005, S.RUNNING)
    observe(at(14), 1006, S.LOADING)
    observe(at(15), 1006, S.RUNNING)
    observe(at(16.5), 1003, S.LOADING)  # a stale observation of a forgotten-by-now machine: ignored
    observe(at(20.5), 1005, S.GONE)  # stopped once drained
    observe(at(22), 1007, S.REQUESTED)
    observe(at(22) + timedelta(minutes=1), 1007, S.LOADING)
    observe(at(22.5), 1008, S.LOADING)
    observe(at(23.5), 1008, S.RUNNING)
    for hour in range(2, 23):  # the provisioner's polls keep saying "running" about producing machines
        observe(at(hour), 1001, S.RUNNING)
    bench(at(1) + timedelta(minutes=10), 1001, "pass")
    bench(at(1.5) + timedelta(minutes=10), 1002, "pass")
    bench(at(8) + timedelta(minutes=20), 1004, "fail")
    bench(at(13) + timedelta(minutes=10), 1005, "pass")
    bench(at(15) + timedelta(minutes=10), 1006, "degraded")
    drain = DrainInstance(
        occurred_at=at(20),
        source="decider",
        idempotency_key="drain-1005-over",
        requested_by="policy",
        instance_id=1005,
        reason=RemovalReason.OVER_PROVISIONED,
    )
    trace.messages.append((at(20), s.fleet_drain, drain, COMMANDS.name(s)))

    # the job system's day: workers come up a few minutes after their machine runs
    jobs = Jobs(now=T0)
    worker_changes = {
        at(1) + timedelta(minutes=5): ("join", 1001),
        at(1.5) + timedelta(minutes=5): ("join", 1002),
        at(8) + timedelta(minutes=5): ("join", 1004),
        at(8) + timedelta(minutes=20): ("die", 1004),
        at(12.5): ("die", 1002),
        at(13) + timedelta(minutes=5): ("join", 1005),
        at(15) + timedelta(minutes=5): ("join", 1006),
        at(20): ("drain", 1005),
        at(20.5): ("die", 1005),
        at(23): ("die", 1001),
    }
    worker_changes[at(23) + timedelta(seconds=1)] = ("die", 1006)  # every worker silent from 23:00
    steps = int((END - T0).total_seconds() // STEP_S)
    for step in range(steps):
        now = jobs.now + timedelta(seconds=STEP_S)
        for moment in sorted(m for m in worker_changes if jobs.now < m <= now):
            change, instance_id = worker_changes[moment]
            worker_id = f"worker-{instance_id}"
            if change == "join":
                jobs.add_worker(worker_id, instance_id=instance_id, gpu_model=GPUS.get(instance_id, "RTX 4090"))
            elif change == "drain":
                jobs.workers[worker_id].slots = 0  # finishes what it runs, takes nothing new
            else:
                jobs.workers[worker_id].alive = False
        for event in jobs.step(STEP_S, arrivals_per_h(now)):
            trace.tasks.append(event)
            trace.messages.append((event.occurred_at, s.task(event.kind), event, demand_stream))
        if step % 2 == 1:
            snapshot = jobs.snapshot()
            trace.last_queue = snapshot
            trace.messages.append((snapshot.occurred_at, s.queue, snapshot, demand_stream))
    trace.messages.sort(key=lambda m: m[0])
    return trace


async def publish_chunk(js: JetStreamContext, messages: list[tuple[datetime, str, Event, str]]) -> None:
    for start in range(0, len(messages), 200):  # pipelined, in order, each acknowledged by JetStream
        await asyncio.gather(
            *(
                js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)
                for _, subject, event, stream in messages[start : start + 200]
            )
        )


async def drained(js: JetStreamContext, settings: Settings) -> bool:
    for spec, durables in DURABLES.items():
        for durable in durables:
            try:
                info = await js.consumer_info(spec.name(settings.subjects), durable)
            except NotFoundError:
                return False
            if info.num_pending or info.num_ack_pending:
                return False
    return True


async def fleet_snapshot(nc: NatsClient, settings: Settings, clock: SimulatedClock) -> FleetSnapshot | None:
    request = FleetSnapshotRequest(occurred_at=clock.now(), source="test")
    try:
        reply = await nc.request(settings.subjects.fleet_snapshot, request.model_dump_json().encode(), timeout=5)
    except NoRespondersError:
        return None
    return FleetSnapshot.model_validate_json(reply.data)


def expected_rate(
    tasks: list[TaskEvent], kind: str, window_s: int, evaluated_at: datetime, bucket_s: int = 60
) -> float:
    """demand's window from the raw trace: the buckets (head - n, head], the newest counted for its elapsed part."""
    now_s = evaluated_at.timestamp()
    head = int(now_s // bucket_s)
    first_s = (head - window_s // bucket_s + 1) * bucket_s
    covered_s = window_s - bucket_s + (now_s - head * bucket_s)
    count = sum(1 for e in tasks if e.kind == kind and first_s <= e.occurred_at.timestamp() <= now_s)
    return count * 3600 / covered_s


async def test_a_day_replayed_through_both_services_with_restarts(
    settings: Settings, js: JetStreamContext, nc: NatsClient
) -> None:
    trace = build_trace(settings)
    clock = SimulatedClock(T0)
    demand_config = DemandSettings()
    fleet_config = FleetSettings()

    def start_demand():  # type: ignore[no-untyped-def]
        return build_demand(ServiceContext("demand", settings, clock), demand_config)

    def start_fleet():  # type: ignore[no-untyped-def]
        return build_fleet(ServiceContext("fleet", settings, clock), fleet_config)

    demand, fleet = start_demand(), start_fleet()
    await demand.start()
    await fleet.start()
    try:
        index = 0
        chunk_end = T0
        while chunk_end < END:
            chunk_end += CHUNK
            clock.set(chunk_end)  # the timers run on what arrived up to the previous chunk
            chunk = []
            while index < len(trace.messages) and trace.messages[index][0] <= chunk_end:
                chunk.append(trace.messages[index])
                index += 1
            await publish_chunk(js, chunk)
            await eventually(lambda: drained(js, settings), timeout_s=30)
            await clock.advance_and_settle(15)  # and once more on what has just arrived
            if chunk_end == at(12):
                await demand.stop()
                demand = start_demand()
                await demand.start()
            if chunk_end == at(16):
                await fleet.stop()
                fleet = start_fleet()
                await fleet.start()
        assert index == len(trace.messages)

        async def final_signal() -> DemandSignal | None:
            await clock.advance_and_settle(15)
            try:
                msg = await js.get_last_msg(LATEST.name(settings.subjects), settings.subjects.demand_signal)
            except NotFoundError:
                return None
            signal = DemandSignal.model_validate_json(msg.data)
            return signal if signal.occurred_at > END else None

        signal = await eventually(final_signal, interval_s=0.1)
        snapshot = await eventually(lambda: fleet_snapshot(nc, settings, clock))
    finally:
        await demand.stop()
        await fleet.stop()

    # demand: every window equals a recount of the trace at the signal's moment
    assert trace.last_queue is not None
    assert signal.state == DemandState.WORKERS_STALLED
    assert signal.pending_tasks == trace.last_queue.queues[0].pending
    assert signal.pending_tasks > 0
    for stats in signal.windows:
        for kind, value in (("submitted", stats.arrival_rate_per_h), ("completed", stats.completion_rate_per_h)):
            assert value == pytest.approx(expected_rate(trace.tasks, kind, stats.window_s, signal.occurred_at)), (
                kind,
                stats.window_s,
            )
    last_completion = max(e.occurred_at for e in trace.tasks if e.kind == "completed")
    assert signal.last_completion_at == last_completion
    assert signal.producing_workers == 0
    assert signal.windows[0].completion_rate_per_h == 0  # silent for the last hour

    # fleet: each machine's fate as the trace wrote it, its completions counted once across the restart
    completed = {i: sum(1 for e in trace.tasks if e.kind == "completed" and e.instance_id == i) for i in PRICES}
    states = {line.instance_id: (line.state, line.failure_reason) for line in snapshot.instances}
    assert states == {
        1001: (S.FAILED, FailureReason.DEAD),
        1006: (S.FAILED, FailureReason.DEAD),
        1007: (S.LOADING, None),
        1008: (S.RUNNING, None),
    }
    for line in snapshot.instances:
        assert line.tasks_completed == completed[line.instance_id]
        assert line.price_usd_per_h == PRICES[line.instance_id]
    assert snapshot.spend_usd_per_h == pytest.approx(sum(PRICES[i] for i in states))
    assert (snapshot.producing_instances, snapshot.arriving_instances) == (0, 2)
    assert completed[1001] > 1000 and completed[1006] > 50
