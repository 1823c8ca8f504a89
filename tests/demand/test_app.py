"""The demand service on a real nats-server and redis-server, at simulated time."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from services.demand.app import build
from services.demand.config import DemandSettings
from shared.bus import event_headers
from shared.clock import SimulatedClock
from shared.contract import (
    DeadLetter,
    DemandSignal,
    DemandState,
    Event,
    FleetSnapshot,
    InstanceState,
    QueueDepth,
    QueueSnapshot,
    TaskEvent,
    Trigger,
    TriggerReason,
)
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import DEMAND, DLQ, LATEST, TRIGGERS
from tests.helpers import eventually

CONFIG = DemandSettings(evaluate_interval_s=15, publish_interval_s=60)


async def publish(js: JetStreamContext, settings: Settings, subject: str, event: Event, stream: str) -> None:
    await js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)


async def publish_task(js: JetStreamContext, settings: Settings, event: TaskEvent) -> None:
    await publish(js, settings, settings.subjects.task(event.kind), event, DEMAND.name(settings.subjects))


async def latest(js: JetStreamContext, settings: Settings) -> DemandSignal | None:
    try:
        msg = await js.get_last_msg(LATEST.name(settings.subjects), settings.subjects.demand_signal)
    except NotFoundError:
        return None
    return DemandSignal.model_validate_json(msg.data)


async def signal_from(
    js: JetStreamContext, settings: Settings, clock: SimulatedClock, moment: datetime
) -> DemandSignal:
    """Step the clock an evaluation interval at a time until demand has published a signal from `moment` on."""

    async def fresh() -> DemandSignal | None:
        signal = await latest(js, settings)
        if signal is not None and signal.occurred_at >= moment:
            return signal
        await clock.advance_and_settle(CONFIG.evaluate_interval_s)
        return None

    result: DemandSignal = await eventually(fresh, interval_s=0.1)
    return result


def counted(ctx: ServiceContext, kind: str) -> float:
    return ctx.metrics.registry.get_sample_value("fleetpilot_demand_task_events_total", {"kind": kind}) or 0.0


def steady_trace(start: datetime, minutes: int, per_minute: int, workers: int) -> list[TaskEvent]:
    """Arrivals each minute and each worker completing two tasks a minute (120/h)."""
    events = []
    for minute in range(minutes):
        at = start + timedelta(minutes=minute)
        for i in range(per_minute):
            events.append(TaskEvent(occurred_at=at, source="jobs", kind="submitted", task_id=f"t{minute}-{i}"))
        for w in range(workers):
            for half in range(2):
                events.append(
                    TaskEvent(
                        occurred_at=at + timedelta(seconds=30 * half),
                        source="jobs",
                        kind="completed",
                        task_id=f"c{minute}-{w}-{half}",
                        worker_id=f"worker-{w}",
                        duration_s=240,
                    )
                )
    return events


async def test_signal_goes_to_latest_and_a_restart_keeps_the_windows(
    settings: Settings, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    start = sim_clock.now() - timedelta(minutes=60)
    trace = steady_trace(start, 60, per_minute=3, workers=2)
    for event in trace:
        await publish_task(js, settings, event)

    ctx = ServiceContext("demand", settings, sim_clock)
    app = build(ctx, CONFIG)
    await app.start()
    try:
        await eventually(lambda: counted(ctx, "submitted") == 180 and counted(ctx, "completed") == 240)
        before = await signal_from(js, settings, sim_clock, sim_clock.now() + timedelta(seconds=1))
    finally:
        await app.stop()
    assert before.windows[1].arrival_rate_per_h == pytest.approx(180, rel=0.02)  # the 1 h window
    assert before.producing_workers == 2
    assert before.state == DemandState.SERVED

    sim_clock.advance(60)
    restarted_ctx = ServiceContext("demand", settings, sim_clock)
    restarted = build(restarted_ctx, CONFIG)
    await restarted.start()
    try:
        after = await signal_from(js, settings, sim_clock, sim_clock.now())
        # the same events again, under new message ids: the restored memory of event ids recognises them
        for event in trace[:50]:
            await js.publish(
                settings.subjects.task(event.kind),
                event.model_dump_json().encode(),
                stream=DEMAND.name(settings.subjects),
            )
        duplicates = {"service": "demand"}
        await eventually(
            lambda: (
                restarted_ctx.metrics.registry.get_sample_value("fleetpilot_duplicate_events_total", duplicates) == 50
            )
        )
        assert counted(restarted_ctx, "submitted") == 0
    finally:
        await restarted.stop()
    assert after.windows[-1].arrival_rate_per_h > 0  # a restart never reads as "no demand"
    # the same arrivals over a slightly longer observed span
    assert after.windows[-1].arrival_rate_per_h == pytest.approx(before.windows[-1].arrival_rate_per_h, rel=0.05)
    assert after.signal_seq > before.signal_seq


async def test_stalled_workers_raise_a_p0_trigger_and_the_fleet_snapshot_counts(
    settings: Settings, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    subjects = settings.subjects
    now = sim_clock.now()
    for event in steady_trace(now - timedelta(minutes=40), 20, per_minute=2, workers=3):
        await publish_task(js, settings, event)
    snapshot = QueueSnapshot(
        occurred_at=now, source="jobs", queues=[QueueDepth(task_type="default", pending=59, running=0)]
    )
    await publish(js, settings, subjects.queue, snapshot, DEMAND.name(subjects))
    fleet = FleetSnapshot(
        occurred_at=now,
        source="fleet",
        instances=[],
        counts_by_state={InstanceState.PRODUCING: 3},
        spend_usd_per_h=1.5,
        producing_instances=3,
        arriving_instances=0,
    )
    await publish(js, settings, subjects.fleet_snapshot_published, fleet, LATEST.name(subjects))

    ctx = ServiceContext("demand", settings, sim_clock)
    app = build(ctx, CONFIG)
    await app.start()
    try:
        await eventually(lambda: counted(ctx, "completed") == 120)
        first = await signal_from(js, settings, sim_clock, now + timedelta(seconds=1))
        # work is seen waiting from now on; nothing completes for a quarter of an hour
        signal = await signal_from(js, settings, sim_clock, now + timedelta(minutes=16))
        stalled_subject = subjects.trigger("p0", TriggerReason.WORKERS_STALLED)

        async def trigger() -> Trigger | None:
            try:
                raw = await js.get_last_msg(TRIGGERS.name(subjects), stalled_subject)
            except NotFoundError:
                return None
            return Trigger.model_validate_json(raw.data)

        stalled = await eventually(trigger)
    finally:
        await app.stop()
    # fleet's producing instances, read from LATEST, at the pace measured per worker
    assert first.fleet_capacity_tasks_per_h == pytest.approx(3 * (first.per_worker_throughput_tasks_per_h or 120))
    assert first.state != DemandState.IDLE
    assert signal.state == DemandState.WORKERS_STALLED
    assert signal.pending_tasks == 59
    assert "no completion for 16 min" in signal.explanation
    assert stalled.priority == "p0" and stalled.source == "demand"
    assert "59 tasks pending" in stalled.detail


async def test_an_implausible_queue_snapshot_is_dead_lettered_with_its_reason_counted_and_never_applied(
    settings: Settings, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    """`fleetpilot publish queue default=99999999999999999999` once rented 19 machines in three minutes."""
    subjects = settings.subjects
    now = sim_clock.now()
    for pending in (30, 99_999_999_999_999_999_999):
        snapshot = QueueSnapshot(
            occurred_at=now, source="jobs", queues=[QueueDepth(task_type="default", pending=pending, running=0)]
        )
        await publish(js, settings, subjects.queue, snapshot, DEMAND.name(subjects))
    ctx = ServiceContext("demand", settings, sim_clock)
    app = build(ctx, CONFIG)
    await app.start()
    try:

        async def dead_letter() -> DeadLetter | None:
            try:
                raw = await js.get_last_msg(DLQ.name(subjects), subjects.dead_letter("demand"))
            except NotFoundError:
                return None
            return DeadLetter.model_validate_json(raw.data)

        letter = await eventually(dead_letter)
        signal = await signal_from(js, settings, sim_clock, now + timedelta(seconds=1))
        registry = ctx.metrics.registry
        parked = registry.get_sample_value(
            "fleetpilot_dead_letters_total", {"service": "demand", "reason": "implausible_input"}
        )
    finally:
        await app.stop()
    assert letter.reason == "implausible_input" and letter.original_subject == subjects.queue
    assert "99999999999999999999 pending is beyond the plausible 1000000 tasks" in letter.error
    assert parked == 1
    assert signal.pending_tasks == 30  # the last plausible snapshot stands


async def test_a_job_system_field_it_does_not_know_is_counted_not_dead_lettered(
    settings: Settings, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    event = TaskEvent(occurred_at=sim_clock.now(), source="jobs", kind="submitted", task_id="t-1")
    newer = {**json.loads(event.model_dump_json()), "priority": "high"}  # what a newer job system sends
    snapshot = QueueSnapshot(
        occurred_at=sim_clock.now(), source="jobs", queues=[QueueDepth(task_type="a", pending=3, running=0)]
    )
    newer_snapshot = json.loads(snapshot.model_dump_json())
    newer_snapshot["queues"][0]["region"] = "eu"
    ctx = ServiceContext("demand", settings, sim_clock)
    app = build(ctx, CONFIG)
    await app.start()
    try:
        await js.publish(
            settings.subjects.task("submitted"), json.dumps(newer).encode(), stream=DEMAND.name(settings.subjects)
        )
        await js.publish(
            settings.subjects.queue, json.dumps(newer_snapshot).encode(), stream=DEMAND.name(settings.subjects)
        )

        def unknown(message: str) -> float:
            labels = {"service": "demand", "message": message}
            return ctx.metrics.registry.get_sample_value("fleetpilot_unknown_fields_total", labels) or 0.0

        await eventually(lambda: counted(ctx, "submitted") == 1 and unknown("QueueSnapshot") == 1)
    finally:
        await app.stop()
    assert unknown("TaskEvent") == 1
    dead = ctx.metrics.registry.get_sample_value(
        "fleetpilot_dead_letters_total", {"service": "demand", "reason": "invalid_message"}
    )
    assert dead == 0


async def test_a_completion_replayed_under_a_fresh_event_id_is_counted_as_refused(
    settings: Settings, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    completed = TaskEvent(occurred_at=sim_clock.now(), source="jobs", kind="completed", task_id="t-1", worker_id="w")
    replayed = completed.model_copy(update={"event_id": "replayed"})
    ctx = ServiceContext("demand", settings, sim_clock)
    app = build(ctx, CONFIG)
    await app.start()
    try:
        for event in (completed, replayed):
            await publish_task(js, settings, event)

        def refused(reason: str) -> float:
            labels = {"reason": reason}
            return ctx.metrics.registry.get_sample_value("fleetpilot_demand_refused_task_events_total", labels) or 0.0

        await eventually(lambda: refused("repeated_completion") == 1)
    finally:
        await app.stop()
    assert counted(ctx, "completed") == 2
