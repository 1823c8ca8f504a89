"""demand's pure core: task events and queue/fleet snapshots in, a DemandSignal out; time is always an argument.

Feed it with `ingest(event, now)` (or `ingest_counts` for aggregated minutes), `observe_queue`, `observe_fleet`,
and ask `evaluate(now)`. No I/O and no clock reads: a week of events replays in seconds, deterministically.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime

from services.demand.config import HOUR_S, DemandSettings
from services.demand.records import (
    Evaluation,
    FleetView,
    IngestOutcome,
    JournalledSeenIds,
    PublishedMark,
    QueueView,
    TaskCounts,
    TimelineEntry,
    TriggerIntent,
    WorkerRecord,
)
from services.demand.rules import Measurement, classify, next_trend
from services.demand.season import ArrivalHistory
from services.demand.signal import signal_of, worth_publishing
from services.demand.windows import (
    ARRIVALS,
    BUSY_COMPLETIONS,
    BUSY_S,
    COMPLETIONS,
    DURATION_SUM_S,
    DURATIONS,
    FAILURES,
    STARTED,
    BucketSeries,
)
from shared.contract import (
    DemandState,
    DemandTrend,
    FleetSnapshot,
    InstanceState,
    QueueSnapshot,
    SeasonEcho,
    TaskEvent,
    TriggerReason,
)
from shared.seen_ids import ResentCompletions

OTHER_TASK_TYPE = "other"  # task types beyond max_task_types are pooled here: memory stays bounded


def producer_key(instance_id: int | None, worker_id: str | None) -> str | None:
    """Whom a completion is counted for: the machine it ran on when known, else the job system's worker (None:
    neither).

    The decider sizes machines, so capacity is producers × one producer's pace, and both must count machines.
    Job systems name workers as they like: one per machine, one per process (eight on a pipelined machine), or
    one per task. Counted by those names, a machine read as eight workers at an eighth of its pace each, and a
    job system naming a worker per task read as 92 workers at 15 tasks/h with 140 tasks queued: over-provisioned,
    the verdict that gives machines back (tests/demand/test_core.py). Machines and workers are keyed apart, so a
    worker the job system happens to call `instance:7` is not machine 7."""
    if instance_id is not None:
        return machine_producer(instance_id)
    return worker_producer(worker_id) if worker_id else None


def machine_producer(instance_id: int) -> str:
    """The producer a completion on this machine counts for (`producer_key`)."""
    return f"instance:{instance_id}"


def worker_producer(worker_id: str) -> str:
    """The producer a completion of a worker that names no machine counts for (`producer_key`)."""
    return f"worker:{worker_id}"


# a machine's completions kept for placing late ones: at least `worker_timeline_len`, and every one within the busy
# gap cap of the newest, up to this many (64 worker processes at 16 tasks/h each fill ten minutes with ~170)
MAX_TIMELINE_ENTRIES = 1024


class DemandCore:
    def __init__(self, config: DemandSettings | None = None) -> None:
        self.config = config or DemandSettings()
        c = self.config
        self.bucket_s = c.bucket_s
        self.tracked_s = c.tracked_windows_s
        self.window_buckets = tuple(w // c.bucket_s for w in self.tracked_s)
        self.window_index = {w: i for i, w in enumerate(self.tracked_s)}
        self.overall = BucketSeries(self.window_buckets)
        self.by_type: dict[str, BucketSeries] = {}
        self.by_gpu: dict[str, BucketSeries] = {}
        self.seen = JournalledSeenIds(c.seen_event_ids)
        # not saved (unlike the event ids): after a restart only a replay of a task completed before it counts again
        self.resent = ResentCompletions(c.completions_remembered)
        self.history = ArrivalHistory(c.season_bucket_s, c.season_s + HOUR_S + c.season_bucket_s)
        self.history_since_s: float | None = None  # the history counts every arrival from here on
        self.workers: OrderedDict[str, WorkerRecord] = OrderedDict()  # by last activity, oldest first
        self.recent_producers: OrderedDict[str, float] = OrderedDict()  # by last completion, oldest first
        # the machine each worker last named: a worker may name it on its first event only (fleet's rule too)
        self.worker_machines: OrderedDict[str, int] = OrderedDict()  # least recently named first
        self.types_with_started: set[str] = set()
        self.queue: QueueView | None = None
        self.fleet: FleetView | None = None
        self.observing_since_s: float | None = None
        self.last_completion_s: float | None = None
        self.too_late_events = 0
        # task events still waiting on demand's consumer after the latest batch read (JetStream's count, set by the
        # adapter): while many wait, no completion missing by the clock makes workers stalled
        self.unread_task_events = 0
        # tasks waiting right now, kept per event (O(1)) from the last queue snapshot: says whether a
        # completion happened while workers were saturated
        self.pending_estimate = 0
        # what evaluate() carries from one call to the next
        self.state: DemandState | None = None
        self.trend = DemandTrend.STEADY
        self.above_capacity_since_s: float | None = None
        self.waiting_since_s: float | None = None
        self.last_published: PublishedMark | None = None
        self.signal_seq = 0

    # ---- inputs -------------------------------------------------------------------------------------------
    def ingest(self, event: TaskEvent, now: datetime) -> IngestOutcome:
        """Apply one task event once; duplicates (same event_id, or a completion resent under a new one) and events
        beyond the longest window are not."""
        if not self.seen.first_time(event.event_id):
            return IngestOutcome.DUPLICATE
        now_s = now.timestamp()
        # a producer's clock running ahead must not open buckets in the future
        at_s = min(event.occurred_at.timestamp(), now_s)
        bucket = int(at_s // self.bucket_s)
        if self._before_every_window(at_s, now_s) or not self.overall.accepts(bucket):
            self.too_late_events += 1
            return IngestOutcome.TOO_LATE
        # one completion resent 2,000 times under fresh event ids read as twice the fleet's capacity
        if event.kind == "completed" and not self.resent.first_report(
            event.task_type, event.task_id, event.occurred_at, event.worker_id, event.instance_id
        ):
            return IngestOutcome.REPEATED_COMPLETION
        self._observed(at_s)
        task_type = self._task_type(event.task_type)
        kind = event.kind
        series = self._type_series(task_type)
        producer = producer_key(self._machine_of(event), event.worker_id)
        worker = self._worker(producer, event, at_s) if producer is not None else None
        if kind == "started":
            self.types_with_started.add(task_type)
        self._track_pending(kind, task_type, at_s)
        if kind == "submitted":
            self._count(series, None, bucket, ARRIVALS, 1)
            self.history.add(at_s, 1)
        elif kind == "started":
            self._count(series, None, bucket, STARTED, 1)
        elif kind == "completed":
            self._count(series, None, bucket, COMPLETIONS, 1)
            if event.duration_s is not None:
                self._count(series, None, bucket, DURATION_SUM_S, event.duration_s)
                self._count(series, None, bucket, DURATIONS, 1)
            if self.last_completion_s is None or at_s > self.last_completion_s:
                self.last_completion_s = at_s
            if worker is not None and producer is not None:
                self._busy(worker, at_s, task_type, event.duration_s)
                # a name seen for one completion only is no producer yet: a job system naming a worker per task
                # never names one twice, and a real worker completes again within a task's time
                if len(worker.timeline) >= 2:
                    self._producer(producer, at_s)
        else:
            self._count(series, None, bucket, FAILURES, 1)
        return IngestOutcome.APPLIED

    def ingest_counts(self, counts: TaskCounts, now: datetime) -> IngestOutcome:
        """Apply aggregated steps (no event ids: the caller guarantees each is fed once)."""
        at_s = min(counts.at.timestamp(), now.timestamp())
        bucket = int(at_s // self.bucket_s)
        if not self.overall.accepts(bucket):
            self.too_late_events += 1
            return IngestOutcome.TOO_LATE
        self._observed(at_s)
        task_type = self._task_type(counts.task_type)
        series = self._type_series(task_type)
        gpu = self._gpu_series(counts.gpu_model) if counts.gpu_model else None
        if counts.started:
            self.types_with_started.add(task_type)
        for field_index, amount in (
            (ARRIVALS, counts.submitted),
            (STARTED, counts.started),
            (COMPLETIONS, counts.completed),
            (FAILURES, counts.failed),
            (DURATION_SUM_S, counts.duration_sum_s),
            (DURATIONS, counts.durations),
        ):
            if amount:
                self._count(series, None, bucket, field_index, amount)
        if counts.submitted:
            self.history.add(at_s, counts.submitted)
        if counts.busy_completions:
            self._count(series, gpu, bucket, BUSY_COMPLETIONS, counts.busy_completions)
            self._count(series, gpu, bucket, BUSY_S, counts.busy_s)
        if counts.completed and (self.last_completion_s is None or at_s > self.last_completion_s):
            self.last_completion_s = at_s
        for producer in counts.producers:
            self._producer(producer, at_s)
        return IngestOutcome.APPLIED

    def implausible(self, snapshot: QueueSnapshot) -> str | None:
        """Why a queue snapshot cannot be meant (more tasks than `max_plausible_queue_tasks`), or None."""
        ceiling = self.config.max_plausible_queue_tasks
        for depth in snapshot.queues:
            for count, what in ((depth.pending, "pending"), (depth.running, "running")):
                if count > ceiling:
                    return f"queue {depth.task_type!r}: {count} {what} is beyond the plausible {ceiling} tasks"
        total = sum(depth.pending for depth in snapshot.queues)
        if total > ceiling:
            return f"{total} pending in all is beyond the plausible {ceiling} tasks"
        return None

    def observe_queue(self, snapshot: QueueSnapshot, now: datetime) -> IngestOutcome:
        """The job system's queue: the base that later task events adjust. An older snapshot changes nothing.

        A task type's rise beyond `unconfirmed_rise_tasks` over the previous snapshot counts that step only,
        until the next snapshot shows it again: one outlier then a normal snapshot moves the fleet by a small
        step, a real surge is counted whole a snapshot later (a minute, against hours of startup)."""
        if not self.seen.first_time(snapshot.event_id):
            return IngestOutcome.DUPLICATE
        now_s = now.timestamp()
        at_s = min(snapshot.occurred_at.timestamp(), now_s)
        if self._before_every_window(at_s, now_s) or (self.queue is not None and at_s < self.queue.at_s):
            return IngestOutcome.TOO_LATE
        self._observed(at_s)
        pending: dict[str, int] = {}
        running: dict[str, int] = {}
        for depth in snapshot.queues:
            task_type = self._task_type(depth.task_type)
            pending[task_type] = pending.get(task_type, 0) + depth.pending
            running[task_type] = running.get(task_type, 0) + depth.running
        counted = self._confirmed_rises(pending)
        self.queue = QueueView(at_s, counted, running, pending if counted != pending else None)
        self.pending_estimate = sum(counted.values())
        return IngestOutcome.APPLIED

    def _before_every_window(self, at_s: float, now_s: float) -> bool:
        """Older than the longest window: too late to count, and never the moment demand began watching (a first
        message stamped 1970 made the windows read as watched for hours and an echo of zeros be published)."""
        return at_s < now_s - self.config.longest_window_s

    def _confirmed_rises(self, reported: dict[str, int]) -> dict[str, int]:
        previous = self.queue
        if previous is None:  # nothing to compare with: the plausibility ceiling is the guard
            return dict(reported)
        step = self.config.unconfirmed_rise_tasks
        return {task_type: min(n, previous.reported(task_type) + step) for task_type, n in reported.items()}

    def observe_fleet(self, snapshot: FleetSnapshot, now: datetime) -> IngestOutcome:
        """fleet's view: how many instances produce or are about to, and each instance's GPU model."""
        at_s = min(snapshot.occurred_at.timestamp(), now.timestamp())
        if self.fleet is not None and at_s < self.fleet.at_s:
            return IngestOutcome.TOO_LATE
        counts = snapshot.counts_by_state
        ready = counts.get(InstanceState.REGISTERED, 0) + counts.get(InstanceState.BENCHMARKED, 0)
        gpus = {line.instance_id: line.gpu_model for line in snapshot.instances if line.gpu_model}
        self.fleet = FleetView(at_s, snapshot.producing_instances, ready, gpus)
        return IngestOutcome.APPLIED

    # ---- the verdict --------------------------------------------------------------------------------------
    def evaluate(self, now: datetime) -> Evaluation:
        """The signal at `now`; whether it is worth publishing (material change or cadence); the triggers due."""
        c = self.config
        now_s = now.timestamp()
        self._observed(now_s)
        m = self.measure(now_s)

        work_waiting = m.pending > 0 or m.short_arrivals > 0
        if work_waiting:
            self.waiting_since_s = self.waiting_since_s if self.waiting_since_s is not None else now_s
        else:
            self.waiting_since_s = None
        above = m.short_arrivals > 0 and m.short_arrival_rate_per_h > m.capacity_tasks_per_h
        if above:
            self.above_capacity_since_s = self.above_capacity_since_s if self.above_capacity_since_s else now_s
        else:
            self.above_capacity_since_s = None
        m.above_capacity_for_s = now_s - self.above_capacity_since_s if self.above_capacity_since_s else 0.0
        reference_s = max(self.last_completion_s or -1e18, self.waiting_since_s or -1e18)
        m.without_completion_s = now_s - reference_s if work_waiting else 0.0
        m.unread_task_events = self.unread_task_events

        state, explanation = classify(m, c)
        trend = next_trend(self.trend, m.trend_relative_change, m.trend_arrivals, c)

        triggers: list[TriggerIntent] = []
        if state != self.state:
            if state == DemandState.WORKERS_STALLED:
                triggers.append(TriggerIntent("p0", TriggerReason.WORKERS_STALLED, explanation))
            elif self.state is not None:
                triggers.append(
                    TriggerIntent("p1", TriggerReason.DEMAND_STATE_CHANGE, f"{self.state.value} -> {state.value}")
                )
        if trend != self.trend:
            triggers.append(
                TriggerIntent("p1", TriggerReason.DEMAND_TREND_CHANGE, f"{self.trend.value} -> {trend.value}")
            )
        self.state, self.trend = state, trend

        publish = worth_publishing(self.last_published, now_s, state, trend, m, self.config)
        if publish:
            self.signal_seq += 1
            self.last_published = PublishedMark(now_s, state, trend, m.pending, m.capacity_tasks_per_h)
        return Evaluation(signal_of(self, now, m, state, trend, explanation), publish, tuple(triggers))

    def measure(self, now_s: float) -> Measurement:
        """Every number the state rules read, at `now_s` (advances the windows to now; changes no verdict)."""
        c = self.config
        head = int(now_s // self.bucket_s)
        for series in self._all_series():
            series.advance(head)
        self._forget_idle_workers(now_s)
        short_s = self.tracked_s[0]
        while self.recent_producers and next(iter(self.recent_producers.values())) < now_s - short_s:
            self.recent_producers.popitem(last=False)

        short_i = 0
        short_arrivals = self.overall.window_sum(short_i, ARRIVALS)
        short_rate = short_arrivals * HOUR_S / self.covered_s(short_s, now_s)
        sustain_rate = self._rate(self.overall, c.sustain_s, ARRIVALS, now_s)
        peak_rate = max(
            self._rate(self.overall, w, ARRIVALS, now_s) for w in self.tracked_s if w <= c.over_provisioned_lookback_s
        )
        per_worker = self.throughput_of(self.overall)
        per_worker_used = per_worker if per_worker is not None else c.default_worker_throughput_tasks_per_h
        fleet = self._fresh_fleet(now_s)
        producing_workers = len(self.recent_producers)
        # workers outside fleet's view (or draining ones) still count while they complete tasks
        capacity_workers = max(producing_workers, fleet.producing if fleet else 0)
        pending, running, by_type_queue = self._queue_counts()
        longest_s = self.config.longest_window_s
        completed_lately = self.last_completion_s is not None and now_s - self.last_completion_s <= longest_s
        trend_i = self.window_index[c.trend_window_s]
        trend_arrivals = self.overall.complete_arrivals[trend_i]
        trend_rate = self._rate(self.overall, c.trend_window_s, ARRIVALS, now_s)
        slope_per_h2 = self.slope_per_h2(self.overall, trend_i, now_s)
        relative = slope_per_h2 * (c.trend_window_s / HOUR_S) / max(trend_rate, 1.0)
        return Measurement(
            pending=pending,
            running=running,
            by_type_queue=by_type_queue,
            short_window_s=short_s,
            short_arrivals=int(short_arrivals),
            short_arrival_rate_per_h=short_rate,
            sustained_arrival_rate_per_h=min(short_rate, sustain_rate),
            peak_arrival_rate_per_h=peak_rate,
            producing_workers=producing_workers,
            fleet_producing=fleet.producing if fleet else None,
            fleet_ready=fleet.ready if fleet else None,
            capacity_workers=capacity_workers,
            per_worker_throughput_tasks_per_h=per_worker,
            capacity_tasks_per_h=capacity_workers * per_worker_used,
            backlog_worker_hours=pending / per_worker_used,
            workers_expected=bool(fleet and fleet.producing + fleet.ready > 0) or completed_lately,
            trend_relative_change=relative,
            trend_arrivals=trend_arrivals,
            trend_slope_per_h2=slope_per_h2,
        )

    # ---- internals ----------------------------------------------------------------------------------------
    def _observed(self, at_s: float) -> None:
        if self.observing_since_s is None or at_s < self.observing_since_s:
            self.observing_since_s = at_s
        if self.history_since_s is None:
            self.history_since_s = at_s

    def _track_pending(self, kind: str, task_type: str, at_s: float) -> None:
        if self.queue is not None and at_s <= self.queue.at_s:
            return  # the snapshot already counts it
        if kind == "submitted":
            self.pending_estimate += 1
        elif kind == "started" or task_type not in self.types_with_started:
            self.pending_estimate = max(0, self.pending_estimate - 1)

    def _task_type(self, task_type: str) -> str:
        if task_type in self.by_type or len(self.by_type) < self.config.max_task_types:
            return task_type
        return OTHER_TASK_TYPE

    def _type_series(self, task_type: str) -> BucketSeries:
        series = self.by_type.get(task_type)
        if series is None:
            series = self.by_type[task_type] = BucketSeries(self.window_buckets)
        return series

    def _gpu_series(self, gpu_model: str) -> BucketSeries | None:
        """The model's series; None for a new model past `max_gpu_models` (counted overall and by task type only:
        a job system naming a GPU per host grew the series, the saved state and the signal without bound)."""
        series = self.by_gpu.get(gpu_model)
        if series is None:
            if len(self.by_gpu) >= self.config.max_gpu_models:
                return None
            series = self.by_gpu[gpu_model] = BucketSeries(self.window_buckets)
        return series

    def _all_series(self) -> Iterable[BucketSeries]:
        yield self.overall
        yield from self.by_type.values()
        yield from self.by_gpu.values()

    def _count(
        self, series: BucketSeries, gpu: BucketSeries | None, bucket: int, field_index: int, amount: float
    ) -> None:
        self.overall.add(bucket, field_index, amount)
        series.add(bucket, field_index, amount)
        if gpu is not None:
            gpu.add(bucket, field_index, amount)

    def _machine_of(self, event: TaskEvent) -> int | None:
        """The event's machine: the one it names, else the one its worker named last."""
        worker_id, instance_id = event.worker_id, event.instance_id
        if not worker_id:
            return instance_id
        if instance_id is None:
            return self.worker_machines.get(worker_id)
        self.worker_machines[worker_id] = instance_id
        self.worker_machines.move_to_end(worker_id)
        while len(self.worker_machines) > self.config.max_producers:
            self.worker_machines.popitem(last=False)
        return instance_id

    def _worker(self, producer: str, event: TaskEvent, at_s: float) -> WorkerRecord:
        worker = self.workers.get(producer)
        if worker is None:
            worker = self.workers[producer] = WorkerRecord()
            while len(self.workers) > self.config.max_producers:
                self.workers.popitem(last=False)  # the least recently active
        if event.instance_id is not None:
            worker.instance_id = event.instance_id
        if event.gpu_model:
            worker.gpu_model = event.gpu_model
        elif worker.gpu_model is None and worker.instance_id is not None and self.fleet is not None:
            worker.gpu_model = self.fleet.gpu_by_instance.get(worker.instance_id)
        if at_s >= worker.last_seen_s:
            worker.last_seen_s = at_s
            self.workers.move_to_end(producer)
        return worker

    def _producer(self, producer: str, at_s: float) -> None:
        last = self.recent_producers.get(producer)
        if last is None or at_s > last:
            self.recent_producers[producer] = at_s
            self.recent_producers.move_to_end(producer)
            while len(self.recent_producers) > self.config.max_producers:
                # the one whose last completion is oldest (a late one was appended behind newer ones)
                oldest = min(self.recent_producers, key=self.recent_producers.__getitem__)
                del self.recent_producers[oldest]

    def _busy(self, worker: WorkerRecord, at_s: float, task_type: str, duration_s: float | None = None) -> None:
        """A producer's throughput counts only the time it was saturated: a gap between two of its
        completions counts when tasks were waiting at both ends. An underloaded worker completes as fast as
        tasks arrive, and that pace would read as its capacity (capacity would then always equal arrivals).

        Completions are kept in time order per worker, so the same events in any arrival order give the same
        busy time: a late one splits the gap it falls into, and that gap's contribution is taken back.

        A worker's first completion has no gap before it; its own run time stands for the time the worker was
        busy before it. A pipelined worker starts several tasks at once and their completions come seconds
        apart: counted without that lead, its first batch read as 438-577 tasks/h against its 120 (the busy
        demo's first morning gave back three machines as surplus the moment they ran).
        """
        timeline = worker.timeline
        keep = self.config.worker_timeline_len
        if len(timeline) >= keep and at_s < timeline[0][0]:
            return  # older than everything this worker still remembers: its gap is unknown
        entry = (at_s, task_type, worker.gpu_model, self.pending_estimate > 0)
        index = len(timeline)
        while index > 0 and timeline[index - 1][0] > at_s:
            index -= 1
        before = timeline[index - 1] if index > 0 else None
        after = timeline[index] if index < len(timeline) else None
        if before is None and (worker.lead is not None or not timeline):
            self._lead(worker, (entry, duration_s) if duration_s is not None else None)
        if before is not None and after is not None:
            self._gap(before, after, -1)
        if before is not None:
            self._gap(before, entry, 1)
        if after is not None:
            self._gap(entry, after, 1)
        timeline.insert(index, entry)
        # kept by time as well as by count: a machine whose processes or GPUs report apart completes many tasks a
        # minute, and sixteen of them would hold a few seconds (its late completions then lost their gaps)
        horizon_s = timeline[-1][0] - self.config.busy_gap_cap_s
        while len(timeline) > keep and (timeline[0][0] < horizon_s or len(timeline) > MAX_TIMELINE_ENTRIES):
            del timeline[0]

    def _lead(self, worker: WorkerRecord, lead: tuple[TimelineEntry, float] | None) -> None:
        """The worker's earliest completion counted with its run time as the busy time before it; an earlier
        completion arriving late takes the lead over (the old one's count is taken back)."""
        if worker.lead is not None:
            self._count_lead(worker.lead, -1)
        if lead is not None:
            self._count_lead(lead, 1)
        worker.lead = lead

    def _count_lead(self, lead: tuple[TimelineEntry, float], sign: int) -> None:
        entry, duration_s = lead
        at_s, _, _, saturated = entry
        self._gap((at_s - duration_s, "", None, saturated), entry, sign)

    def _gap(self, start: TimelineEntry, end: TimelineEntry, sign: int) -> None:
        """Count (or take back) the busy gap between two completions of one worker, at the later one."""
        start_s, _, _, start_saturated = start
        end_s, task_type, gpu_model, end_saturated = end
        gap_s = end_s - start_s
        if not (start_saturated and end_saturated) or gap_s > self.config.busy_gap_cap_s:
            return  # the worker may have been idle (no work), not slow
        bucket = int(end_s // self.bucket_s)
        if not self.overall.accepts(bucket):
            return
        series = self._type_series(task_type)
        gpu = self._gpu_series(gpu_model) if gpu_model else None
        self._count(series, gpu, bucket, BUSY_COMPLETIONS, sign)
        self._count(series, gpu, bucket, BUSY_S, sign * gap_s)

    def _forget_idle_workers(self, now_s: float) -> None:
        horizon_s = now_s - self.config.longest_window_s
        while self.workers and next(iter(self.workers.values())).last_seen_s < horizon_s:
            self.workers.popitem(last=False)

    def covered_s(self, window_s: int, now_s: float) -> float:
        """The time window `window_s` really spans at `now_s`: the newest bucket counts for what has elapsed."""
        head_start_s = int(now_s // self.bucket_s) * self.bucket_s
        span_s = window_s - self.bucket_s + (now_s - head_start_s)
        if self.observing_since_s is not None:
            span_s = min(span_s, now_s - self.observing_since_s)
        return max(span_s, min(self.config.min_rate_span_s, float(window_s)), 1.0)

    def _rate(self, series: BucketSeries, window_s: int, field_index: int, now_s: float) -> float:
        return series.window_sum(self.window_index[window_s], field_index) * HOUR_S / self.covered_s(window_s, now_s)

    def slope_per_h2(self, series: BucketSeries, index: int, now_s: float) -> float:
        first_bucket = int((self.observing_since_s or now_s) // self.bucket_s)
        per_bucket2 = series.arrival_slope_per_bucket2(index, first_bucket)
        return per_bucket2 * (HOUR_S / self.bucket_s) ** 2

    def throughput_of(self, series: BucketSeries) -> float | None:
        """Tasks/h of one worker while it has work, over the throughput window, else the longest window."""
        for window_s in (self.config.throughput_window_s, self.config.longest_window_s):
            i = self.window_index[window_s]
            busy_s = series.window_sum(i, BUSY_S)
            busy_n = series.window_sum(i, BUSY_COMPLETIONS)
            if busy_s > 0 and busy_n > 0:
                return busy_n * HOUR_S / busy_s
        return None

    def _fresh_fleet(self, now_s: float) -> FleetView | None:
        if self.fleet is None or now_s - self.fleet.at_s > self.config.fleet_snapshot_stale_s:
            return None
        return self.fleet

    def _queue_counts(self) -> tuple[int, int, dict[str, tuple[int, int]]]:
        """Pending and running per task type: the last queue snapshot adjusted by the events after its bucket."""
        queue = self.queue
        after_bucket = int(queue.at_s // self.bucket_s) if queue else -1
        types = set(self.by_type) | (set(queue.pending) | set(queue.running) if queue else set())
        by_type: dict[str, tuple[int, int]] = {}
        for task_type in types:
            pending = queue.pending.get(task_type, 0) if queue else 0
            running = queue.running.get(task_type, 0) if queue else 0
            series = self.by_type.get(task_type)
            if series is not None:
                arrived = series.sum_after(after_bucket, ARRIVALS)
                started = series.sum_after(after_bucket, STARTED)
                finished = series.sum_after(after_bucket, COMPLETIONS) + series.sum_after(after_bucket, FAILURES)
                if task_type in self.types_with_started:
                    pending += int(arrived - started)
                    running += int(started - finished)
                else:  # a job system that never reports `started`: a task leaves the queue when it finishes
                    pending += int(arrived - finished)
            by_type[task_type] = (max(0, pending), max(0, running))
        return (
            sum(p for p, _ in by_type.values()),
            sum(r for _, r in by_type.values()),
            by_type,
        )

    def season_echo(self, now_s: float) -> SeasonEcho | None:
        """Yesterday's next hours, once a whole season and the hour before it have been watched."""
        c = self.config
        if not c.season_s or self.history_since_s is None or now_s - self.history_since_s < c.season_s + HOUR_S:
            return None
        return self.history.echo(now_s, c.season_s, c.season_ahead_s)
