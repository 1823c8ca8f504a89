"""demand's pure core on plain values and simulated time: the states the decider relies on."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from services.demand.config import DemandSettings
from services.demand.core import DemandCore
from services.demand.records import Evaluation, IngestOutcome, TaskCounts
from services.demand.rules import Measurement
from services.demand.saved import SavedDemand, restored, saved_of
from services.demand.windows import COMPLETIONS
from shared.contract import (
    DemandState,
    DemandTrend,
    FleetSnapshot,
    InstanceState,
    QueueDepth,
    QueueSnapshot,
    TaskEvent,
    TriggerReason,
)
from tests.demand.jobs import Jobs, run

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


@dataclass
class Harness:
    """Feeds a core from a job system and evaluates it once a minute, keeping every evaluation."""

    core: DemandCore = field(default_factory=DemandCore)
    jobs: Jobs = field(default_factory=lambda: Jobs(now=T0))
    evaluations: list[tuple[datetime, Evaluation]] = field(default_factory=list)

    def feed(self, events: list[TaskEvent], snapshot: QueueSnapshot | None, now: datetime) -> None:
        for event in events:
            self.core.ingest(event, now)
        if snapshot is not None:
            self.core.observe_queue(snapshot, now)
            self.evaluations.append((now, self.core.evaluate(now)))

    def run(self, minutes: float, arrivals_per_h: float) -> list[tuple[datetime, Evaluation]]:
        start = len(self.evaluations)
        run(self.jobs, minutes, arrivals_per_h, self.feed)
        return self.evaluations[start:]

    @property
    def last(self) -> Evaluation:
        return self.evaluations[-1][1]


def states(evaluations: list[tuple[datetime, Evaluation]]) -> list[DemandState]:
    return [e.signal.state for _, e in evaluations]


def test_no_arrivals_and_an_empty_queue_is_idle() -> None:
    core = DemandCore()
    core.observe_queue(QueueSnapshot(occurred_at=T0, source="jobs", queues=[]), T0)
    evaluation = core.evaluate(T0 + timedelta(minutes=1))
    assert evaluation.signal.state == DemandState.IDLE
    assert evaluation.signal.pending_tasks == 0


def test_a_fleet_that_finished_its_work_goes_idle_once_arrivals_stop() -> None:
    h = Harness()
    h.jobs.add_worker("w1")
    h.run(60, arrivals_per_h=60)
    assert h.last.signal.state == DemandState.SERVED
    after = h.run(30, arrivals_per_h=0)
    assert after[-1][1].signal.state == DemandState.IDLE
    assert DemandState.WORKERS_STALLED not in states(after)


def test_a_burst_of_8_pending_on_a_served_fleet_stays_served() -> None:
    h = Harness()
    h.jobs.add_worker("w1")
    h.run(120, arrivals_per_h=90)
    assert h.last.signal.state == DemandState.SERVED
    # the burst: ten tasks at once, of which the worker's two free slots take two
    h.feed(h.jobs.submit(10, h.jobs.now), None, h.jobs.now)
    after = h.run(30, arrivals_per_h=90)
    assert max(e.signal.pending_tasks for _, e in after) >= 8
    assert set(states(after)) == {DemandState.SERVED}


def test_arrivals_above_capacity_for_30_minutes_flip_to_under_provisioned_and_not_before() -> None:
    h = Harness()
    h.jobs.add_worker("w1")  # 120 tasks/h
    h.run(60, arrivals_per_h=90)
    assert h.last.signal.state == DemandState.SERVED
    surge = h.run(60, arrivals_per_h=240)
    previous_above_s = 0.0
    for _, evaluation in surge:
        signal = evaluation.signal
        if signal.above_capacity_for_s > 0:  # one unbroken stretch above capacity, minute by minute
            assert signal.above_capacity_for_s == previous_above_s + 60
        previous_above_s = signal.above_capacity_for_s
        assert (signal.state == DemandState.UNDER_PROVISIONED) == (signal.above_capacity_for_s >= 1800)
    assert h.last.signal.state == DemandState.UNDER_PROVISIONED
    assert h.last.signal.per_worker_throughput_tasks_per_h == pytest.approx(120, rel=0.02)
    assert h.last.signal.sustained_arrival_rate_per_h == pytest.approx(240, rel=0.1)
    # the backlog alone (about an hour of one worker) would not have justified it
    assert h.last.signal.backlog_worker_hours < 1.5


def test_all_workers_silent_with_59_queued_is_stalled_with_one_p0_never_idle() -> None:
    h = Harness()
    for i in range(3):
        h.jobs.add_worker(f"w{i}")
    h.run(60, arrivals_per_h=300)
    for worker in h.jobs.workers.values():
        worker.alive = False
    h.feed(h.jobs.submit(59, h.jobs.now), None, h.jobs.now)
    after = h.run(40, arrivals_per_h=0)
    assert DemandState.IDLE not in states(after)
    assert after[-1][1].signal.state == DemandState.WORKERS_STALLED
    assert after[-1][1].signal.pending_tasks == 59
    stalled_at = next(at for at, e in after if e.signal.state == DemandState.WORKERS_STALLED)
    last_completion = after[-1][1].signal.last_completion_at
    assert last_completion is not None and stalled_at - last_completion >= timedelta(minutes=15)
    p0 = [t for _, e in after for t in e.triggers if t.priority == "p0"]
    assert [t.reason for t in p0] == [TriggerReason.WORKERS_STALLED]
    assert "59 tasks pending" in p0[0].detail


def test_stalled_while_the_fleet_says_workers_are_there_even_long_after_the_last_completion() -> None:
    core = DemandCore()
    core.observe_fleet(fleet_snapshot(T0, producing=2), T0)
    core.observe_queue(QueueSnapshot(occurred_at=T0, source="jobs", queues=[queue("prove", 59)]), T0)
    assert core.evaluate(T0).signal.state == DemandState.SERVED  # two producers: the backlog is theirs
    later = T0 + timedelta(minutes=16)
    core.observe_fleet(fleet_snapshot(later, producing=2), later)
    assert core.evaluate(later).signal.state == DemandState.WORKERS_STALLED


def test_workers_are_not_called_stalled_while_many_task_events_wait_unread() -> None:
    """Their completions may be among the unread events (a busy machine's fleet read 8,000 behind the clock); once
    demand has caught up, the same silence is a stall."""
    core = DemandCore()
    core.observe_fleet(fleet_snapshot(T0, producing=2), T0)
    core.observe_queue(QueueSnapshot(occurred_at=T0, source="jobs", queues=[queue("prove", 59)]), T0)
    core.evaluate(T0)
    later = T0 + timedelta(minutes=16)
    core.observe_fleet(fleet_snapshot(later, producing=2), later)
    core.unread_task_events = core.config.stall_unjudged_above_unread + 1
    assert core.evaluate(later).signal.state != DemandState.WORKERS_STALLED
    core.unread_task_events = 0
    assert core.evaluate(later + timedelta(seconds=30)).signal.state == DemandState.WORKERS_STALLED


def test_duplicate_and_out_of_order_events_do_not_change_rates() -> None:
    jobs = Jobs(now=T0)
    jobs.add_worker("w1", gpu_model="RTX 4090")
    jobs.add_worker("w2", gpu_model="RTX 5090", task_s=180.0)  # 160 tasks/h
    first = jobs.submit(400, T0)  # a standing queue: both workers stay saturated
    trace: list[TaskEvent] = []
    snapshots: list[QueueSnapshot] = []
    run(jobs, 90, 200, lambda events, snapshot, now: (trace.extend(events), snapshot and snapshots.append(snapshot)))
    end = jobs.now

    in_order = DemandCore()
    in_order.observe_queue(snapshots[0], T0)
    for event in first + trace:
        in_order.ingest(event, event.occurred_at)

    shuffled = DemandCore()
    shuffled.observe_queue(snapshots[0], T0)
    rng = random.Random(7)
    noisy = first + trace + rng.sample(trace, len(trace) // 3)  # a third delivered twice
    # reordered within 3-minute spans, as a lagging producer or a redelivery would
    noisy.sort(key=lambda e: (e.occurred_at.timestamp() // 180, rng.random()))
    latest = T0
    outcomes = []
    for event in noisy:
        latest = max(latest, event.occurred_at)
        outcomes.append(shuffled.ingest(event, latest))
    assert outcomes.count(IngestOutcome.DUPLICATE) == len(trace) // 3

    a, b = in_order.evaluate(end).signal, shuffled.evaluate(end).signal
    assert a.windows == b.windows
    assert a.by_task_type == b.by_task_type
    assert a.per_worker_throughput_tasks_per_h == pytest.approx(b.per_worker_throughput_tasks_per_h)
    assert a.throughput_by_gpu_model_tasks_per_h == pytest.approx(b.throughput_by_gpu_model_tasks_per_h)
    assert a.throughput_by_gpu_model_tasks_per_h == pytest.approx({"RTX 4090": 120, "RTX 5090": 160}, rel=0.02)
    assert a.windows[0].completion_rate_per_h == pytest.approx(280, rel=0.05)


def test_an_event_older_than_the_longest_window_is_counted_and_ignored() -> None:
    core = DemandCore()
    now = T0 + timedelta(hours=8)
    core.ingest(task("submitted", T0, "first"), T0)
    core.ingest(task("submitted", now), now)
    late = task("submitted", now - timedelta(hours=6, minutes=2))
    assert core.ingest(late, now) == IngestOutcome.TOO_LATE
    assert core.too_late_events == 1
    assert core.evaluate(now).signal.windows[-1].arrival_rate_per_h == pytest.approx(1 / 6, rel=0.01)


def test_a_first_message_stamped_long_ago_is_too_late_not_the_start_of_watching() -> None:
    """A job system's first message with an unset clock (1970) counted as the moment demand began watching: every
    window read as watched for hours (a steady 120/h read 15/h over 6 h) and an echo of zeros was published as a
    day's history. Older than the longest window, it is too late, counted like any late event."""
    core = DemandCore()
    ancient = datetime(1970, 1, 1, tzinfo=UTC)
    stale_queue = QueueSnapshot(occurred_at=ancient, source="jobs", queues=[queue("default", 0)])
    assert core.observe_queue(stale_queue, T0) == IngestOutcome.TOO_LATE
    assert core.ingest(task("submitted", ancient, "unset-clock"), T0) == IngestOutcome.TOO_LATE
    assert core.too_late_events == 1
    for minute in range(45):
        at = T0 + timedelta(minutes=minute)
        core.ingest(task("submitted", at, f"s{minute}-a"), at)
        core.ingest(task("submitted", at, f"s{minute}-b"), at)
    signal = core.evaluate(T0 + timedelta(minutes=45)).signal
    assert {w.window_s: round(w.arrival_rate_per_h) for w in signal.windows} == {900: 120, 3600: 120, 21600: 120}
    assert signal.season is None


def test_gpu_models_past_the_cap_count_overall_and_are_not_measured_apart() -> None:
    """A job system that names a GPU per host grew a series per name, the saved state and the signal without
    bound (10,000 names: 509 MB and a 730 kB signal). Past `max_gpu_models` a new name counts overall only."""
    core = DemandCore(DemandSettings(max_gpu_models=3))
    core.observe_queue(QueueSnapshot(occurred_at=T0, source="jobs", queues=[queue("default", 100)]), T0)
    for n in range(10):
        for k in range(2):  # a worker's pace is measured from its second completion on
            at = T0 + timedelta(seconds=n + 30 * k)
            event = TaskEvent(occurred_at=at, source="jobs", kind="completed", task_id=f"t{n}-{k}", worker_id=f"w{n}",
                              gpu_model=f"RTX 4090 host-{n}", duration_s=30.0)  # fmt: skip
            assert core.ingest(event, at) == IngestOutcome.APPLIED
    assert sorted(core.by_gpu) == ["RTX 4090 host-0", "RTX 4090 host-1", "RTX 4090 host-2"]
    signal = core.evaluate(T0 + timedelta(minutes=1)).signal
    assert len(signal.throughput_by_gpu_model_tasks_per_h) <= 3
    assert signal.windows[0].completion_rate_per_h == pytest.approx(20 * 3600 / core.config.min_rate_span_s)


def test_a_backlog_the_fleet_cannot_clear_within_a_startup_time_is_under_provisioned() -> None:
    h = Harness()
    h.jobs.add_worker("w1")
    h.run(30, arrivals_per_h=60)
    h.feed(h.jobs.submit(300, h.jobs.now), None, h.jobs.now)
    after = h.run(2, arrivals_per_h=60)
    signal = after[-1][1].signal
    assert signal.state == DemandState.UNDER_PROVISIONED
    assert signal.backlog_worker_hours > 1.5
    assert "backlog" in signal.explanation


def test_many_workers_for_a_trickle_is_over_provisioned() -> None:
    h = Harness()
    for i in range(4):
        h.jobs.add_worker(f"w{i}")
    h.run(89, arrivals_per_h=60)
    # idle workers complete nothing: only fleet's view shows that four machines are producing
    h.core.observe_fleet(fleet_snapshot(h.jobs.now, producing=4), h.jobs.now)
    h.run(1, arrivals_per_h=60)
    assert h.last.signal.state == DemandState.OVER_PROVISIONED
    assert h.last.signal.fleet_capacity_tasks_per_h == 480


def named_per_task(harness: Harness) -> None:
    """The job system names each completion's worker after its task (a pod per task, an attempt id), as some do."""
    feed = harness.feed

    def renamed(events: list[TaskEvent], snapshot: QueueSnapshot | None, now: datetime) -> None:
        for i, event in enumerate(events):
            if event.kind == "completed" and event.worker_id is not None:
                events[i] = event.model_copy(update={"worker_id": f"{event.worker_id}/{event.task_id}"})
        feed(events, snapshot, now)

    harness.feed = renamed  # type: ignore[method-assign]


def test_a_worker_named_per_task_on_a_known_machine_counts_as_that_machine() -> None:
    """Three machines, behind their load, whose job system names a worker per task: counted by those names they
    read as ~90 workers at 15 tasks/h, over-provisioned with 140 tasks queued. The machines are the producers."""
    h = Harness()
    for i in range(3):
        h.jobs.add_worker(f"w{i}", instance_id=100 + i)
    named_per_task(h)
    h.run(60, arrivals_per_h=500)
    signal = h.last.signal
    assert signal.state is DemandState.UNDER_PROVISIONED
    assert signal.producing_workers == 3
    assert signal.per_worker_throughput_tasks_per_h == pytest.approx(120, rel=0.05)


def test_a_worker_named_per_task_without_a_machine_is_no_producer() -> None:
    """Without the machine's id a name seen once is no producer: the fleet is read short (arrivals above what
    it shows), never over-provisioned with work waiting."""
    h = Harness()
    for i in range(3):
        h.jobs.add_worker(f"w{i}")
    named_per_task(h)
    evaluations = h.run(60, arrivals_per_h=500)
    assert DemandState.OVER_PROVISIONED not in states(evaluations)
    assert h.last.signal.state is DemandState.UNDER_PROVISIONED
    assert h.last.signal.producing_workers == 0
    assert h.last.signal.pending_tasks > 100


def test_a_machine_whose_processes_are_workers_is_one_producer_at_the_machines_pace() -> None:
    """Eight single-slot worker processes on one machine (a job system naming a worker per process): the machine
    finishes 120 tasks/h, what the decider sizes with; counted per process it read as eight at 15/h."""
    h = Harness()
    for process in range(8):
        h.jobs.add_worker(f"m7-p{process}", slots=1, instance_id=7)
    h.run(90, arrivals_per_h=200)
    signal = h.last.signal
    assert signal.producing_workers == 1
    assert signal.per_worker_throughput_tasks_per_h == pytest.approx(120, rel=0.05)
    assert signal.fleet_capacity_tasks_per_h == pytest.approx(120, rel=0.05)


def test_a_worker_counts_as_a_producer_from_its_second_completion() -> None:
    core = DemandCore()
    core.observe_queue(Jobs(now=T0).snapshot(), T0)
    first, second = T0 + timedelta(seconds=240), T0 + timedelta(seconds=270)
    core.ingest(task("completed", first, "t1", worker_id="w1"), first)
    assert core.evaluate(first).signal.producing_workers == 0
    core.ingest(task("completed", second, "t2", worker_id="w1"), second)
    assert core.evaluate(second).signal.producing_workers == 1


def test_completions_naming_only_their_machine_count_for_it() -> None:
    core = DemandCore()
    core.observe_queue(Jobs(now=T0).snapshot(), T0)
    for n in range(1, 4):
        at = T0 + timedelta(seconds=240 + 30 * n)
        core.ingest(task("completed", at, f"t{n}", instance_id=7), at)
    assert list(core.recent_producers) == ["instance:7"]


def test_a_worker_that_names_its_machine_once_counts_for_it_afterwards() -> None:
    """A worker may name its instance on its first event only (fleet registers it so, too): its later
    completions are the same machine's, not a second producer at half its pace."""
    h = Harness()
    h.jobs.add_worker("w7", instance_id=7)
    h.jobs.add_worker("w8", instance_id=8)
    h.feed(h.jobs.submit(40, T0), None, T0)  # enough for both: their first events (starts) name their machines
    h.run(1, arrivals_per_h=300)
    for worker in h.jobs.workers.values():
        worker.instance_id = None  # from here on they do not
    h.run(60, arrivals_per_h=300)
    signal = h.last.signal
    assert set(h.core.recent_producers) == {"instance:7", "instance:8"}
    assert signal.producing_workers == 2
    assert signal.per_worker_throughput_tasks_per_h == pytest.approx(120, rel=0.05)


def test_a_completion_resent_under_fresh_event_ids_counts_once() -> None:
    """Four machines at 120 tasks/h read as 454 tasks/h of capacity, and as 883 once the job system resent one
    completion 2,000 times (each with a new event id). The same task id completed again later (a job system that
    numbers its tasks anew after a restart) counts."""

    def capacity(replays: int) -> float:
        core = DemandCore()
        n = 0
        for minute in range(60):
            now = T0 + timedelta(minutes=minute)
            core.observe_queue(QueueSnapshot(occurred_at=now, source="jobs", queues=[queue("prove", 400, 8)]), now)
            for machine in range(1, 5):
                for half_s in (0, 30):
                    at, n = now + timedelta(seconds=half_s + machine), n + 1
                    event = task("completed", at, f"c{n}", worker_id=f"w{machine}", instance_id=machine)
                    core.ingest(event.model_copy(update={"duration_s": 240.0}), at)
        replayed = task("completed", now + timedelta(seconds=40), "c-replayed", worker_id="w1", instance_id=1)
        for r in range(replays):
            core.ingest(replayed.model_copy(update={"event_id": f"r{r}"}), now)
        return core.evaluate(now + timedelta(seconds=59)).signal.fleet_capacity_tasks_per_h

    assert capacity(2000) == pytest.approx(capacity(2), rel=0.01)

    core = DemandCore()
    outcomes = [core.ingest(task(kind, T0, "t-retried"), T0) for kind in ("failed", "completed", "completed")]
    assert outcomes == [IngestOutcome.APPLIED, IngestOutcome.APPLIED, IngestOutcome.REPEATED_COMPLETION]
    other_type = task("completed", T0, "t-retried").model_copy(update={"task_type": "verify"})
    assert core.ingest(other_type, T0) is IngestOutcome.APPLIED
    later = T0 + timedelta(minutes=5)
    assert core.ingest(task("completed", later, "t-retried"), later) is IngestOutcome.APPLIED
    assert core.overall.window_sum(0, COMPLETIONS) == 3


def test_a_machine_of_many_processes_keeps_the_gaps_of_its_late_completions() -> None:
    """64 single-slot processes on one machine (960 tasks/h), half of whose completions reach demand two minutes
    late: a machine's completions are kept for the busy gap cap, not only the last sixteen (a few seconds of
    this machine), so the late ones still find their place and the machine reads as it does when none is late
    (with sixteen kept: 673 tasks/h against 897)."""

    def measured(late_s: float) -> Measurement:
        core = DemandCore()
        processes, task_s = 64, 240.0
        deliveries: list[tuple[datetime, TaskEvent]] = []
        for process in range(processes):
            done_s = task_s + process * task_s / processes
            while done_s < 3600:
                at = T0 + timedelta(seconds=done_s)
                event = TaskEvent(
                    occurred_at=at, source="jobs", kind="completed", task_id=f"p{process}-{done_s:.0f}",
                    task_type="prove", worker_id=f"m7-p{process}", instance_id=7, duration_s=task_s,
                )  # fmt: skip
                deliveries.append((at + timedelta(seconds=late_s if process % 2 else 0.5), event))
                done_s += task_s
        deliveries.sort(key=lambda delivery: delivery[0])
        backlog = QueueSnapshot(occurred_at=T0, source="jobs", queues=[queue("prove", 1000, processes)])
        for delivered, event in deliveries:
            core.observe_queue(backlog.model_copy(update={"occurred_at": delivered}), delivered)
            core.ingest(event, delivered)
        return core.measure((T0 + timedelta(seconds=3800)).timestamp())

    on_time, late = measured(0.5), measured(120.0)
    assert late.producing_workers == on_time.producing_workers == 1
    assert on_time.per_worker_throughput_tasks_per_h == pytest.approx(897, rel=0.01)  # the first start is its lead
    assert late.per_worker_throughput_tasks_per_h == pytest.approx(on_time.per_worker_throughput_tasks_per_h, rel=0.01)


def test_producers_remembered_are_bounded_and_the_oldest_go_first() -> None:
    core = DemandCore(DemandSettings(max_producers=100))
    for n in range(1000):
        at = T0 + timedelta(seconds=n)
        for k in range(2):
            core.ingest(task("completed", at, f"t{n}-{k}", worker_id=f"w{n}"), at)
    assert len(core.workers) == 100 and len(core.recent_producers) == 100
    assert next(reversed(core.workers)) == "worker:w999"
    # a producer whose completions come late joins behind newer ones: the oldest by time leaves (here the late
    # one itself, older than any kept), not the first in line
    late = T0 + timedelta(seconds=850)
    for k in range(2):
        core.ingest(task("completed", late, f"late-{k}", worker_id="late"), T0 + timedelta(seconds=1000))
    assert "worker:late" not in core.recent_producers and "worker:w900" in core.recent_producers


def test_a_restored_state_is_held_to_the_bound_it_comes_back_under() -> None:
    core = DemandCore()
    for n in range(300):
        at = T0 + timedelta(seconds=n)
        for k in range(2):
            core.ingest(task("completed", at, f"t{n}-{k}", worker_id=f"w{n}"), at)
    smaller = restored(saved_of(core), DemandSettings(max_producers=50))
    assert len(smaller.workers) == 50 and len(smaller.recent_producers) == 50
    assert next(reversed(smaller.recent_producers)) == "worker:w299"


def test_a_ramp_reads_rising_then_a_fall_reads_falling_with_p1_triggers() -> None:
    h = Harness()
    for i in range(6):
        h.jobs.add_worker(f"w{i}")
    h.run(60, arrivals_per_h=100)
    assert h.last.signal.trend == DemandTrend.STEADY
    for rate in (150, 200, 300, 400):
        h.run(15, arrivals_per_h=rate)
    assert h.last.signal.trend == DemandTrend.RISING
    h.run(60, arrivals_per_h=400)
    for rate in (250, 150, 80, 40):
        h.run(15, arrivals_per_h=rate)
    assert h.last.signal.trend == DemandTrend.FALLING
    changes = [t.detail for _, e in h.evaluations for t in e.triggers if t.reason == TriggerReason.DEMAND_TREND_CHANGE]
    assert "steady -> rising" in changes
    assert changes[-1].endswith("-> falling")
    assert all(t.priority == "p1" for _, e in h.evaluations for t in e.triggers if t.reason != "workers_stalled")


def test_publishes_on_cadence_and_on_material_change_only() -> None:
    core = DemandCore(DemandSettings(publish_interval_s=60))
    core.observe_queue(QueueSnapshot(occurred_at=T0, source="jobs", queues=[]), T0)
    assert core.evaluate(T0).publish
    assert not core.evaluate(T0 + timedelta(seconds=15)).publish
    assert core.evaluate(T0 + timedelta(seconds=60)).publish
    moment = T0 + timedelta(seconds=70)
    core.observe_queue(QueueSnapshot(occurred_at=moment, source="jobs", queues=[queue("prove", 40)]), moment)
    changed = core.evaluate(moment)
    assert changed.publish and changed.signal.state == DemandState.UNDER_PROVISIONED
    assert changed.signal.signal_seq == 3
    assert [t.reason for t in changed.triggers] == [TriggerReason.DEMAND_STATE_CHANGE]


def round_trip(core: DemandCore, config: DemandSettings | None = None, seen_ids: Iterable[str] = ()) -> DemandCore:
    """Saved as the store writes it (JSON) and read back as it reads it."""
    return restored(SavedDemand.model_validate_json(saved_of(core).model_dump_json()), config, seen_ids)


def test_state_round_trip_gives_the_same_signal_and_the_same_future() -> None:
    h = Harness()
    for i in range(2):
        h.jobs.add_worker(f"w{i}", gpu_model="RTX 4090")
    h.jobs.submit(50, T0)
    h.run(100, arrivals_per_h=200)
    restored = round_trip(h.core)
    now = h.jobs.now + timedelta(seconds=20)
    a, b = h.core.evaluate(now), restored.evaluate(now)
    assert a.signal.model_dump(exclude={"event_id"}) == b.signal.model_dump(exclude={"event_id"})
    events = h.jobs.step(30, 200)
    for core in (h.core, restored):
        for event in events:
            core.ingest(event, h.jobs.now)
    later = h.jobs.now + timedelta(minutes=1)
    assert h.core.evaluate(later).signal.model_dump(exclude={"event_id"}) == restored.evaluate(later).signal.model_dump(
        exclude={"event_id"}
    )


def test_remembered_ids_survive_the_round_trip() -> None:
    core = DemandCore()
    event = task("submitted", T0)
    core.ingest(event, T0)
    restored = round_trip(core, seen_ids=core.seen.take_journal())
    assert restored.ingest(event, T0) == IngestOutcome.DUPLICATE


def test_aggregated_counts_give_the_same_rates_as_events() -> None:
    by_event, by_count = DemandCore(), DemandCore()
    now = T0 + timedelta(hours=1)
    for minute in range(60):
        at = T0 + timedelta(minutes=minute)
        for i in range(3):
            by_event.ingest(task("submitted", at, f"{minute}-{i}"), at)
        by_count.ingest_counts(TaskCounts(at=at, task_type="prove", submitted=3), at)
    assert by_event.evaluate(now).signal.windows == by_count.evaluate(now).signal.windows


def test_after_a_whole_season_the_signal_carries_what_followed_this_moment_then() -> None:
    config = DemandSettings(season_s=7200, season_bucket_s=900, season_ahead_s=3600)
    core = DemandCore(config)

    def per_minute(minute: int) -> int:  # 120/h for an hour, 240/h for the next, then 180/h
        return 2 if minute < 60 else 4 if minute < 120 else 3

    for minute in range(190):
        at = T0 + timedelta(minutes=minute, seconds=30)
        core.ingest_counts(TaskCounts(at=at, task_type="prove", submitted=per_minute(minute)), at)
        if minute < 180:  # a season and the hour before it not yet watched: no echo to trust
            assert core.evaluate(at).signal.season is None
    now = T0 + timedelta(minutes=190)
    echo = core.evaluate(now).signal.season
    assert echo is not None
    # a season before now is T0 + 70 min; the echo starts at the next quarter-hour boundary
    assert (echo.season_s, echo.bucket_s, echo.starts_at) == (7200, 900, T0 + timedelta(minutes=75))
    assert echo.level_then_per_h == pytest.approx(150)  # T0+15..75 min: 45 min at 120/h, 15 at 240/h
    assert echo.rates_then_per_h == pytest.approx([240, 240, 240, 180])
    # the history survives a restart, and memory stays one number per quarter hour of the season
    back = round_trip(core, config)
    assert back.evaluate(now).signal.season == echo
    assert len(core.history.counts) == len(back.history.counts) == 14
    # a checkpoint written before the echo existed still loads, with no echo until a season is watched again
    old_state = saved_of(core).model_copy(update={"history": None, "history_since_s": None})
    old = restored(old_state, config)
    old.ingest_counts(TaskCounts(at=now, task_type="prove", submitted=3), now)
    assert old.evaluate(now + timedelta(hours=2)).signal.season is None
    assert old.evaluate(now + timedelta(hours=3)).signal.season is not None


def test_settings_reject_a_season_that_is_not_whole_buckets_or_shorter_than_its_echo() -> None:
    with pytest.raises(ValueError, match="season_s=1000 must be a multiple of season_bucket_s=900"):
        DemandSettings(season_s=1000)
    with pytest.raises(ValueError, match="at least season_ahead_s=7200"):
        DemandSettings(season_s=3600, season_ahead_s=7200)
    assert DemandSettings(season_s=0).season_s == 0  # no echo at all


def test_settings_reject_a_window_that_is_not_a_whole_number_of_buckets() -> None:
    with pytest.raises(ValueError, match="windows_s=1000 must be a positive multiple of bucket_s=60"):
        DemandSettings(windows_s=(1000, 3600))


def task(
    kind: str, at: datetime, task_id: str = "t", worker_id: str | None = None, instance_id: int | None = None
) -> TaskEvent:
    return TaskEvent(
        occurred_at=at, source="jobs", kind=kind, task_id=task_id, task_type="prove",  # type: ignore[arg-type]
        worker_id=worker_id, instance_id=instance_id,
    )  # fmt: skip


def queue(task_type: str, pending: int, running: int = 0) -> QueueDepth:
    return QueueDepth(task_type=task_type, pending=pending, running=running)


def fleet_snapshot(at: datetime, producing: int) -> FleetSnapshot:
    return FleetSnapshot(
        occurred_at=at,
        source="fleet",
        instances=[],
        counts_by_state={InstanceState.PRODUCING: producing},
        spend_usd_per_h=0.5 * producing,
        producing_instances=producing,
        arriving_instances=0,
    )


def test_a_pipelined_worker_s_first_batch_reads_at_its_pace_not_at_the_seconds_between_its_completions() -> None:
    """A worker that starts 8 four-minute tasks at once completes them seconds apart: without the run time before
    its first completion, that batch read as thousands of tasks/h (the busy demo's first morning read 438-577/h
    against 120 and gave back three machines the moment they ran)."""
    core = DemandCore()
    for i in range(400):  # a standing queue: the worker stays saturated
        core.ingest(TaskEvent(occurred_at=T0, source="jobs", kind="submitted", task_id=f"t{i}"), T0)
    done = T0
    for batch in range(2):
        for slot in range(8):
            done = T0 + timedelta(seconds=240 * (batch + 1) + slot)
            event = TaskEvent(occurred_at=done, source="jobs", kind="completed", task_id=f"t{batch * 8 + slot}",
                              worker_id="w1", duration_s=240.0)  # fmt: skip
            core.ingest(event, done)
        if batch == 0:
            first_batch = core.evaluate(done).signal.per_worker_throughput_tasks_per_h
    assert first_batch == pytest.approx(8 * 3600 / (240 + 7), rel=0.01)  # 117/h: 8 tasks in 247 s, not 7 in 7 s
    assert core.evaluate(done).signal.per_worker_throughput_tasks_per_h == pytest.approx(120, rel=0.05)
