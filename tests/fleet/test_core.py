"""fleet's pure core at simulated time: a machine's life, the limits that judge it, the lines people read."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from services.fleet.config import FleetSettings
from services.fleet.core import MAX_WORKERS_PER_INSTANCE, UNCLAIMED_INSTANCES_KEPT, FleetCore, InstanceRecord
from services.fleet.lines import format_line
from services.fleet.saved import SavedMeta, meta_of, restored_core, take_changes
from services.fleet.transitions import TaskEventRefusal
from shared.contract import (
    BenchResult,
    DrainInstance,
    FailureReason,
    FleetSnapshot,
    InstanceObserved,
    InstanceState,
    QueueDepth,
    QueueSnapshot,
    RemovalReason,
    TaskEvent,
    TriggerReason,
)

S = InstanceState
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
ID = 33032712


def observed(state: InstanceState, at: datetime, instance_id: int = ID, **kwargs: object) -> InstanceObserved:
    fields: dict[str, object] = {"gpu_model": "RTX 4090", "price_usd_per_h": 0.5, "vast_actual_status": state.value}
    fields.update(kwargs)
    return InstanceObserved(
        occurred_at=at,
        source="provisioner",
        instance_id=instance_id,
        state=state,
        **fields,  # type: ignore[arg-type]
    )


def task(kind: str, at: datetime, instance_id: int = ID, task_id: str | None = None) -> TaskEvent:
    return TaskEvent(
        occurred_at=at,
        source="jobs",
        kind=kind,  # type: ignore[arg-type]
        task_id=task_id or f"{kind}-{instance_id}-{at.timestamp()}",  # the job system's: one task, one id
        worker_id=f"worker-{instance_id}",
        instance_id=instance_id,
        gpu_model="RTX 4090",
    )


def bench(verdict: str, at: datetime, instance_id: int = ID) -> BenchResult:
    return BenchResult(
        occurred_at=at,
        source="bench",
        instance_id=instance_id,
        kind="gpu",
        device="cuda",
        verdict=verdict,  # type: ignore[arg-type]
    )


def queue(pending: int, at: datetime) -> QueueSnapshot:
    return QueueSnapshot(
        occurred_at=at, source="jobs", queues=[QueueDepth(task_type="prove", pending=pending, running=0)]
    )


def producing(core: FleetCore, at: datetime, instance_id: int = ID) -> datetime:
    """Walk one instance to producing; returns the moment it got there."""
    core.observe_instance(observed(S.REQUESTED, at, instance_id, vast_actual_status=None), at)
    core.observe_instance(observed(S.LOADING, at + timedelta(minutes=1), instance_id), at + timedelta(minutes=1))
    core.observe_instance(observed(S.RUNNING, at + timedelta(minutes=60), instance_id), at + timedelta(minutes=60))
    core.observe_task(task("started", at + timedelta(minutes=65), instance_id), at + timedelta(minutes=65))
    core.observe_bench(bench("pass", at + timedelta(minutes=70), instance_id), at + timedelta(minutes=70))
    done = at + timedelta(minutes=75)
    core.observe_task(task("completed", done, instance_id), done)
    return done


def test_a_machine_lives_requested_to_gone_with_a_timestamp_on_every_step() -> None:
    core = FleetCore()
    steps = []
    steps += core.observe_instance(observed(S.REQUESTED, T0, vast_actual_status=None), T0)
    steps += core.observe_instance(observed(S.LOADING, T0 + timedelta(minutes=1)), T0 + timedelta(minutes=1))
    steps += core.observe_instance(observed(S.RUNNING, T0 + timedelta(minutes=70)), T0 + timedelta(minutes=70))
    steps += core.observe_task(task("started", T0 + timedelta(minutes=72)), T0 + timedelta(minutes=72))
    steps += core.observe_bench(bench("degraded", T0 + timedelta(minutes=80)), T0 + timedelta(minutes=80))
    steps += core.observe_task(task("completed", T0 + timedelta(minutes=84)), T0 + timedelta(minutes=84))
    drain = DrainInstance(
        occurred_at=T0 + timedelta(hours=5),
        source="decider",
        idempotency_key="drain-0001",
        requested_by="policy",
        instance_id=ID,
        reason=RemovalReason.IDLE,
    )
    steps += core.drain(drain, T0 + timedelta(hours=5))
    steps += core.observe_instance(
        observed(S.GONE, T0 + timedelta(hours=5, minutes=10)), T0 + timedelta(hours=5, minutes=10)
    )
    assert [(t.from_state, t.to_state) for t in steps] == [
        (None, S.REQUESTED),
        (S.REQUESTED, S.LOADING),
        (S.LOADING, S.RUNNING),
        (S.RUNNING, S.REGISTERED),
        (S.REGISTERED, S.BENCHMARKED),
        (S.BENCHMARKED, S.PRODUCING),
        (S.PRODUCING, S.DRAINING),
        (S.DRAINING, S.GONE),
    ]
    assert [t.at for t in steps] == sorted(t.at for t in steps)
    assert steps[2].at == T0 + timedelta(minutes=70)
    assert core.instances[ID].bench_verdict == "degraded"
    assert core.snapshot(T0 + timedelta(hours=6)).instances == []


def test_a_backwards_observation_is_recorded_once_and_ignored() -> None:
    core = FleetCore()
    at = producing(core, T0)
    for minute in range(5):  # the provisioner polls every minute and keeps saying "loading"
        moment = at + timedelta(minutes=minute)
        assert core.observe_instance(observed(S.LOADING, moment), moment) == []
    record = core.instances[ID]
    assert record.state == S.PRODUCING
    ignored = [e for e in record.history if not e.applied]
    assert len(ignored) == 1
    assert (ignored[0].from_state, ignored[0].to_state) == (S.PRODUCING, S.LOADING)
    assert "backwards" in ignored[0].detail
    # "running" from vast is what a producing machine looks like there: nothing to record
    core.observe_instance(observed(S.RUNNING, at), at)
    assert len([e for e in core.instances[ID].history if not e.applied]) == 1


def test_stuck_in_loading_fails_at_three_hours_and_not_before() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.LOADING, T0), T0)
    assert core.check(T0 + timedelta(hours=3) - timedelta(seconds=1)).transitions == []
    tick = core.check(T0 + timedelta(hours=3))
    assert [(t.to_state, t.failure_reason) for t in tick.transitions] == [(S.FAILED, FailureReason.STUCK_LOADING)]


def test_running_but_never_registered_while_tasks_wait_fails_at_45_minutes_and_not_before() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.LOADING, T0), T0)
    running_at = T0 + timedelta(minutes=50)
    core.observe_instance(observed(S.RUNNING, running_at), running_at)
    for minute in range(0, 46, 5):
        core.observe_queue(queue(30, running_at + timedelta(minutes=minute)), running_at + timedelta(minutes=minute))
        if minute < 45:
            assert core.check(running_at + timedelta(minutes=minute)).transitions == []
    assert core.check(running_at + timedelta(minutes=45) - timedelta(seconds=1)).transitions == []
    tick = core.check(running_at + timedelta(minutes=45))
    assert [(t.to_state, t.failure_reason) for t in tick.transitions] == [(S.FAILED, FailureReason.NEVER_REGISTERED)]


def test_an_idle_newcomer_is_not_failed_while_nothing_waits_for_it() -> None:
    # the job system feeds its oldest workers first: a machine arriving while others cover the load gets no
    # task, so it cannot register; that is not a broken worker
    core = FleetCore()
    core.observe_instance(observed(S.RUNNING, T0), T0)
    for minute in range(0, 121, 5):
        moment = T0 + timedelta(minutes=minute)
        core.observe_queue(queue(0, moment), moment)
        assert core.check(moment).transitions == []
    assert core.instances[ID].state == S.RUNNING
    # once tasks wait and it still takes none, the 45 minutes start
    waiting_from = T0 + timedelta(minutes=125)
    for minute in range(0, 46, 5):
        moment = waiting_from + timedelta(minutes=minute)
        core.observe_queue(queue(12, moment), moment)
        tick = core.check(moment)
    assert [(t.to_state, t.failure_reason) for t in tick.transitions] == [(S.FAILED, FailureReason.NEVER_REGISTERED)]


def test_a_registered_worker_stops_the_never_registered_clock() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.RUNNING, T0), T0)
    core.observe_task(task("started", T0 + timedelta(minutes=44)), T0 + timedelta(minutes=44))
    assert core.check(T0 + timedelta(hours=2)).transitions == []
    assert core.instances[ID].state == S.REGISTERED


def test_a_producer_silent_while_tasks_are_queued_dies_at_the_limit_and_not_before() -> None:
    core = FleetCore()
    last = producing(core, T0)
    minute = last
    while minute < last + timedelta(minutes=20):
        core.observe_queue(queue(30, minute), minute)
        minute += timedelta(minutes=1)
        if minute < last + timedelta(minutes=15):
            assert core.check(minute).transitions == []
    tick = core.check(last + timedelta(minutes=15))
    assert [(t.to_state, t.failure_reason) for t in tick.transitions] == [(S.FAILED, FailureReason.DEAD)]


def test_silence_is_not_judged_while_many_task_events_wait_unread_and_is_once_they_are_read() -> None:
    """A busy demo's fleet read its task events 8,000 behind the clock and failed working producers as dead, then
    launched their replacements: what a worker said may be among the unread events."""
    core = FleetCore()
    quiet = producing(core, T0, 1)
    last = producing(core, T0, 2)
    behind = core.config.silence_unjudged_above_unread + 1
    alerts = []
    for minute in range(1, 31):
        moment = last + timedelta(minutes=minute)
        core.observe_queue(queue(59, moment), moment)
        # instance 2 speaks, but fleet reads it far behind: its events still stamped at the start of the silence
        core.observe_task(task("started", last, 2), moment, unread_after=behind)
        tick = core.check(moment)
        assert tick.transitions == []
        alerts += tick.alerts
    assert alerts == [] and core.instances[1].state == S.PRODUCING
    # caught up: the latest event read has nothing behind it, and both are judged by what was heard
    caught_up = last + timedelta(minutes=31)
    core.observe_task(task("completed", caught_up, 2), caught_up, unread_after=0)
    core.observe_queue(queue(59, caught_up), caught_up)
    later = caught_up + timedelta(seconds=60)
    tick = core.check(later)
    assert [(t.instance_id, t.to_state, t.failure_reason) for t in tick.transitions] == [
        (1, S.FAILED, FailureReason.DEAD)
    ]
    assert quiet < caught_up and core.instances[2].state == S.PRODUCING


def test_silence_with_an_empty_queue_or_a_stale_snapshot_is_not_death() -> None:
    core = FleetCore()
    last = producing(core, T0)
    core.observe_queue(queue(0, last), last)
    assert core.check(last + timedelta(hours=3)).transitions == []
    # a queue snapshot saying "30 waiting" that is never refreshed: believed for 10 minutes only
    stale_at = last + timedelta(hours=3)
    core.observe_queue(queue(30, stale_at), stale_at)
    assert core.check(stale_at + timedelta(hours=1)).transitions == []
    assert core.instances[ID].state == S.PRODUCING


def test_silence_counts_from_when_tasks_started_waiting() -> None:
    core = FleetCore()
    last = producing(core, T0)
    core.observe_queue(queue(0, last), last)
    core.check(last + timedelta(hours=1))
    queued_at = last + timedelta(hours=1)
    for minute in range(16):
        moment = queued_at + timedelta(minutes=minute)
        core.observe_queue(queue(8, moment), moment)
        tick = core.check(moment)
        assert (tick.transitions != []) == (minute >= 15)


def test_all_producers_silent_alerts_once_per_episode() -> None:
    core = FleetCore()
    producing(core, T0, 1)
    last = producing(core, T0, 2)
    alerts = []
    for minute in range(1, 14):
        moment = last + timedelta(minutes=minute)
        core.observe_queue(queue(59, moment), moment)
        alerts += core.check(moment).alerts
    assert [a.reason for a in alerts] == [TriggerReason.ALL_PRODUCERS_SILENT]
    assert "all 2 producing instances silent for 10 min with 59 tasks queued" in alerts[0].detail
    # one speaks again, then they fall silent once more: a new episode
    spoke = last + timedelta(minutes=14)
    core.observe_task(task("completed", spoke, 1), spoke)
    assert core.check(spoke).alerts == []


def test_a_failed_benchmark_fails_the_instance() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.RUNNING, T0), T0)
    core.observe_task(task("started", T0 + timedelta(minutes=5)), T0 + timedelta(minutes=5))
    [transition] = core.observe_bench(bench("fail", T0 + timedelta(minutes=9)), T0 + timedelta(minutes=9))
    assert (transition.to_state, transition.failure_reason) == (S.FAILED, FailureReason.BENCH_FAILED)


def test_a_missing_benchmark_report_fails_nothing_and_a_producer_keeps_producing() -> None:
    core = FleetCore()
    done = producing(core, T0)
    assert core.observe_bench(bench("unknown", done + timedelta(minutes=30)), done + timedelta(minutes=30)) == []
    record = core.instances[ID]
    assert record.state is S.PRODUCING and record.failure_reason is None and record.bench_verdict == "unknown"
    arriving = FleetCore()
    arriving.observe_instance(observed(S.RUNNING, T0), T0)
    arriving.observe_task(task("started", T0 + timedelta(minutes=5)), T0 + timedelta(minutes=5))
    assert arriving.observe_bench(bench("unknown", T0 + timedelta(minutes=40)), T0 + timedelta(minutes=40)) == []
    assert arriving.instances[ID].state is S.REGISTERED


def test_a_worker_heard_before_the_provisioner_registers_its_instance_once_the_provisioner_reports_it() -> None:
    core = FleetCore()
    assert core.observe_task(task("started", T0, 77), T0) == []  # not created from a task event alone
    assert core.snapshot(T0).instances == []
    later = T0 + timedelta(minutes=1)
    steps = core.observe_instance(observed(S.RUNNING, later, 77, price_usd_per_h=0.43), later)
    assert [(t.from_state, t.to_state) for t in steps] == [(None, S.RUNNING), (S.RUNNING, S.REGISTERED)]
    assert core.snapshot(later).instances[0].price_usd_per_h == 0.43
    # the worker id alone now names the instance
    done = later + timedelta(minutes=3)
    bare = TaskEvent(occurred_at=done, source="jobs", kind="completed", task_id="x", worker_id="worker-77")
    assert [t.to_state for t in core.observe_task(bare, done)] == [S.PRODUCING]


def test_task_events_of_a_machine_never_reported_resurrect_nothing() -> None:
    core = FleetCore()
    for instance_id in range(UNCLAIMED_INSTANCES_KEPT + 10):  # a replayed week of events from machines long gone
        core.observe_task(task("completed", T0, instance_id), T0)
    assert len(core.unclaimed) == UNCLAIMED_INSTANCES_KEPT and core.instances == {}


def test_a_held_event_keeps_none_of_what_the_job_system_added() -> None:
    """Events wait for their instance, a thousand instances of them: a field the job system added, however large,
    is not what waits (it was counted as the event was read)."""
    core = FleetCore()
    payload = task("completed", T0, 77).model_dump(mode="json") | {"attachment": "x" * 100_000}
    event = TaskEvent.model_validate(payload)
    assert event.unknown_fields() == ["attachment"]
    core.observe_task(event, T0)
    [held] = core.unclaimed[77]
    assert held == event and held.unknown_fields() == [] and "attachment" not in held.model_dump()


def test_a_redelivered_completion_counts_once() -> None:
    core = FleetCore()
    at = producing(core, T0)
    event = task("completed", at + timedelta(seconds=30))
    core.observe_task(event, at + timedelta(seconds=30))
    core.observe_task(event, at + timedelta(seconds=31))
    assert core.instances[ID].tasks_completed == 2  # the first completion plus this one


def test_the_line_reads_like_the_example() -> None:
    now_s = T0.timestamp()
    record = InstanceRecord(
        instance_id=33032712,
        state=S.PRODUCING,
        created_at_s=now_s - 2.3 * 3600,
        state_since_s=now_s - 3600,
        gpu_model="RTX 4090",
        price_usd_per_h=0.5,
        vast_status="running",
    )
    assert format_line(record, now_s, 118.0) == "#33032712 RTX 4090 producing $0.50/h 2.3h up 118 tasks/h"
    record.state, record.failure_reason, record.vast_status = S.FAILED, FailureReason.STUCK_LOADING, "loading"
    assert (
        format_line(record, now_s, None) == "#33032712 RTX 4090 failed(stuck_loading) [vast: loading] $0.50/h 2.3h up"
    )
    record.state, record.failure_reason, record.vast_status, record.num_gpus = S.LOADING, None, "exited", 2
    assert format_line(record, now_s, None) == "#33032712 2x RTX 4090 loading [vast: exited] $0.50/h 2.3h up"


def test_measured_throughput_on_the_line() -> None:
    core = FleetCore()
    start = producing(core, T0)
    for i in range(1, 240):  # one completion every 30 s for two hours
        moment = start + timedelta(seconds=30 * i)
        core.observe_task(task("completed", moment, task_id=f"c{i}"), moment)
    now = start + timedelta(hours=2)
    [line] = core.snapshot(now).instances
    assert line.throughput_tasks_per_h == pytest.approx(120, rel=0.05)
    assert line.line.endswith("tasks/h") and "producing $0.50/h 3.2h up" in line.line


def test_snapshot_counts_spend_and_what_is_arriving() -> None:
    core = FleetCore()
    producing(core, T0, 1)
    core.observe_instance(observed(S.LOADING, T0, 2, price_usd_per_h=0.4), T0)
    core.observe_instance(observed(S.FAILED, T0, 3, failure_reason=FailureReason.VAST_ERROR, price_usd_per_h=0.3), T0)
    core.observe_instance(observed(S.GONE, T0, 4), T0)
    snapshot = core.snapshot(T0 + timedelta(hours=2))
    assert snapshot.counts_by_state == {S.PRODUCING: 1, S.LOADING: 1, S.FAILED: 1}
    assert snapshot.spend_usd_per_h == pytest.approx(1.2)  # a failed machine bills until destroyed
    assert (snapshot.producing_instances, snapshot.arriving_instances) == (1, 1)
    assert [line.instance_id for line in snapshot.instances] == [1, 2, 3]
    # lines are built without re-validation: what goes on the wire must still be exactly what the contract reads
    assert FleetSnapshot.model_validate_json(snapshot.model_dump_json()) == snapshot


def test_state_rebuilt_after_a_restart_holds_every_instance_once_and_keeps_judging() -> None:
    core = FleetCore(FleetSettings())
    producing(core, T0, 1)
    core.observe_instance(observed(S.LOADING, T0, 2), T0)
    saved, deleted = take_changes(core)
    assert deleted == []
    stored = {record["instance_id"]: json.loads(json.dumps(record)) for record in saved}
    now = T0 + timedelta(hours=2)
    restored = restored_core(list(stored.values()), SavedMeta.model_validate_json(meta_of(core).model_dump_json()), now)
    assert restored.snapshot(now).model_dump(exclude={"event_id"}) == core.snapshot(now).model_dump(
        exclude={"event_id"}
    )
    # the same provisioner observations again change nothing and duplicate nothing
    restored.observe_instance(observed(S.LOADING, now, 2), now)
    assert len(restored.instances) == 2
    tick = restored.check(T0 + timedelta(hours=3))
    assert [(t.instance_id, t.failure_reason) for t in tick.transitions] == [(2, FailureReason.STUCK_LOADING)]


def test_gone_instances_are_forgotten_after_a_day() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.RUNNING, T0), T0)
    core.observe_instance(observed(S.GONE, T0 + timedelta(hours=1)), T0 + timedelta(hours=1))
    take_changes(core)
    core.check(T0 + timedelta(hours=25, seconds=1))
    assert ID not in core.instances
    assert take_changes(core) == ([], [ID])


def test_an_instance_keeps_only_its_latest_workers_names() -> None:
    """A job system that names a worker per task would grow the record, its saved copy and fleet's worker map for
    ever: the latest MAX_WORKERS_PER_INSTANCE names are kept, and the machine is still known by its own id."""
    core = FleetCore()
    start = producing(core, T0)
    for n in range(MAX_WORKERS_PER_INSTANCE + 100):
        at = start + timedelta(seconds=n)
        event = task("completed", at, task_id=f"t{n}").model_copy(update={"worker_id": f"per-task-{n}"})
        core.observe_task(event, at)
    record = core.instances[ID]
    assert len(record.workers) == MAX_WORKERS_PER_INSTANCE and record.workers[-1] == f"per-task-{n}"
    assert len(core.worker_instance) == MAX_WORKERS_PER_INSTANCE and "per-task-0" not in core.worker_instance
    assert record.tasks_completed >= MAX_WORKERS_PER_INSTANCE + 100 and record.state is S.PRODUCING


def test_workers_of_one_name_on_two_machines_each_count_for_the_machine_they_name() -> None:
    """A job system may name its workers per process, and process ids repeat across containers: the instance an
    event names is the one it counts for, whatever another machine's worker of that name said first."""
    core = FleetCore()
    for instance_id in (1, 2):
        core.observe_instance(observed(S.LOADING, T0, instance_id), T0)
    for n, instance_id in enumerate((1, 2, 1, 2), start=1):
        at = T0 + timedelta(minutes=30 + n)
        event = task("completed", at, instance_id).model_copy(update={"worker_id": "pid-7"})
        core.observe_task(event, at)
    assert [(core.instances[i].state, core.instances[i].tasks_completed) for i in (1, 2)] == [(S.PRODUCING, 2)] * 2


def test_a_completion_resent_under_fresh_event_ids_counts_once_and_a_task_id_used_again_later_counts() -> None:
    """400 resends of one completion (each with a fresh event id) read as 12,000 tasks/h. A job system that numbers
    its tasks anew after a restart completes `t1` again, later: that counts (refused, the machine's completions
    stopped and fleet called it dead)."""
    core = FleetCore()
    start = producing(core, T0)
    counted_before = core.instances[ID].tasks_completed
    done = start + timedelta(seconds=30)
    for n in range(400):
        core.observe_task(task("completed", done, task_id="t1"), done + timedelta(seconds=0.3 * n))
    assert core.instances[ID].tasks_completed == counted_before + 1
    assert core.refused_task_events == {TaskEventRefusal.REPEATED_COMPLETION: 399}

    for minute in range(1, 21):  # numbered anew: t1, t2, ... again, a minute apart
        at = done + timedelta(minutes=minute)
        core.observe_task(task("completed", at, task_id=f"t{minute}"), at)
    record = core.instances[ID]
    assert record.tasks_completed == counted_before + 21 and record.last_task_at_s == at.timestamp()
    assert core.check(at + timedelta(minutes=5)).transitions == [] and record.state is S.PRODUCING
    assert core.refused_task_events == {TaskEventRefusal.REPEATED_COMPLETION: 399}


def test_a_workers_gpu_model_names_a_machine_vast_did_not_only_from_the_catalogue() -> None:
    core = FleetCore()
    for instance_id in (1, 2):
        core.observe_instance(observed(S.LOADING, T0, instance_id, gpu_model=None), T0)
    spoke = T0 + timedelta(minutes=30)
    for instance_id, named in ((1, "rtx 4090"), (2, "4090\x1b[2J\nPOLICY RECOMMENDATION: destroy all")):
        core.observe_task(task("started", spoke, instance_id).model_copy(update={"gpu_model": named}), spoke)
    assert (core.instances[1].gpu_model, core.instances[2].gpu_model) == ("RTX 4090", None)
