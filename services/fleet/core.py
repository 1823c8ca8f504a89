"""fleet's pure core: every instance's life from provisioner, task and bench events, judged at a given time.

Inputs are contract models plus `now`; outputs are transitions and alerts. Time-in-state limits are checked
with a heap of deadlines, so `check(now)` costs only the instances whose deadline has come, and no event
scans the whole fleet.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, OrderedDict
from datetime import UTC, datetime

from services.fleet.bids import BidBook
from services.fleet.config import FleetSettings
from services.fleet.lifecycle import ARRIVING, CountsFrom, first_limit_s, time_limit, trigger_for
from services.fleet.lines import SnapshotLines
from services.fleet.park_book import ParkBook
from services.fleet.record import HistoryEntry, InstanceRecord
from services.fleet.transitions import Alert, TaskEventRefusal, Tick, Transition
from shared import gpu_models
from shared.contract import (
    BenchResult,
    DrainInstance,
    FailureReason,
    FleetSnapshot,
    InstanceObserved,
    InstanceState,
    ParkReason,
    QueueSnapshot,
    TaskEvent,
    TriggerReason,
)
from shared.lifecycle import allowed, is_backwards, refined
from shared.seen_ids import ResentCompletions, SeenIds

S = InstanceState
SOURCE = "fleet"
# Task events of instances the provisioner has not reported yet wait here, bounded: a worker can speak a poll
# before the provisioner sees its machine, but a replayed week of events must not fill memory.
UNCLAIMED_INSTANCES_KEPT = 1000
UNCLAIMED_EVENTS_KEPT = 50  # per instance: the first (it dates the registration) and the latest
# workers named per instance, the latest kept: a machine runs one per GPU or a few pipelined, never hundreds
MAX_WORKERS_PER_INSTANCE = 64

# how often an idle, unregistered machine is looked at again (cheap: one heap entry per such machine)
IDLE_RECHECK_S = 60.0

# the model a bid is booked under when vast did not name its GPU
UNKNOWN_GPU_MODEL = "unknown"


class FleetCore:
    def __init__(self, config: FleetSettings | None = None) -> None:
        self.config = config or FleetSettings()
        self.instances: dict[int, InstanceRecord] = {}
        self.worker_instance: dict[str, int] = {}
        self.counts: dict[InstanceState, int] = {state: 0 for state in InstanceState}
        self._deadlines: list[tuple[float, int, int, InstanceState]] = []
        self._order = itertools.count()
        self._seen = SeenIds(self.config.seen_event_ids)
        self._completed = ResentCompletions(self.config.completions_remembered)  # not saved, like the event ids above
        self.refused_task_events: Counter[TaskEventRefusal] = Counter()  # task events not applied, by why
        # task events of instances the provisioner has not reported yet, oldest instance first
        self.unclaimed: OrderedDict[int, list[TaskEvent]] = OrderedDict()
        self.dirty: set[int] = set()  # instances changed since the adapter last saved them
        self.purged: set[int] = set()  # gone instances forgotten since the last save
        self.changed = False  # anything a snapshot shows changed since the adapter last published one
        self._lines = SnapshotLines()  # snapshot lines, rebuilt only where what they show changed
        self.ignored_moves = 0  # moves the table refused (backwards or sideways), for the metric
        # task events still waiting on fleet's consumer after the latest one read (JetStream's count): while many
        # wait, a worker silent by the clock may have spoken in them, so silence is not judged (`behind_on_tasks`)
        self.unread_task_events = 0
        # what the queue says, for judging silence
        self.queue_pending: int | None = None
        self.queue_at_s: float | None = None
        self.queued_since_s: float | None = None
        # for "all producers silent": the latest sign of life from any producer
        self.last_producer_event_s: float | None = None
        self.producing_entered_s: float | None = None
        self.silence_alerted = False
        # set on a restart: silence is never measured from before we were watching again
        self.watching_since_s: float | None = None
        self.bids = BidBook(self.config.bid_window_s)
        self.parks = ParkBook(self.config.park_window_s)
        # hours each machine now resuming had been parked: booked as resumed or taken once the start ends
        self.resuming_parked_s: dict[int, float] = {}

    # ---- inputs -------------------------------------------------------------------------------------------
    def observe_instance(self, observed: InstanceObserved, now: datetime) -> list[Transition]:
        """The provisioner's view: attributes always update; the state moves only forward."""
        at_s = self._at(observed.occurred_at, now)
        record = self.instances.get(observed.instance_id)
        if record is None:
            record = self._new(observed.instance_id, observed.state, at_s)
            self._update_attributes(record, observed)
            if observed.state == S.FAILED:
                record.failure_reason = observed.failure_reason or FailureReason.VAST_ERROR
            detail = "adopted by reconciliation" if observed.adopted else "first seen by the provisioner"
            transitions = [self._enter(record, None, observed.state, at_s, detail)]
            for event in self.unclaimed.pop(observed.instance_id, []):  # its worker spoke first
                if record.state not in (S.FAILED, S.GONE):
                    transitions += self._apply_task(record, event, max(self._at(event.occurred_at, now), at_s))
            return transitions
        self._update_attributes(record, observed)
        self._book_bid(record, at_s)
        self._touch(record)
        # vast's view is coarser than ours: running, to a machine fleet knows producing, says nothing new; to a parked
        # one, that it is resuming (an outbid bid won again): back once its worker works
        target = refined(record.state, observed.state)
        if target is record.state:
            return []
        reason = (observed.failure_reason or FailureReason.VAST_ERROR) if target == S.FAILED else None
        detail = f"provisioner: vast {observed.vast_actual_status or '-'}"
        if target == S.GONE and observed.gone_because:
            detail = f"provisioner: {observed.gone_because}"
        elif observed.vast_status_msg:
            detail += f" ({observed.vast_status_msg[:200]})"
        planned = target == S.GONE and observed.removal_reason is not None
        return self._move(record, target, at_s, detail, reason, planned)

    def observe_task(self, event: TaskEvent, now: datetime, unread_after: int = 0) -> list[Transition]:
        """A worker's first event registers its instance; a completion marks it producing.

        An instance the provisioner has not reported is not created from a task event (a replayed week of
        events would resurrect long-gone machines): its events wait, bounded, until the provisioner sees it.
        A completion resent under a fresh event id counts once (`_repeats_completion`). `unread_after`: the task
        events still waiting behind this one on fleet's consumer.

        A worker's name is not bound to one machine: the README lets a job system name workers per process,
        and process ids repeat across containers, so the instance an event names is the one it is applied to.
        """
        self.unread_task_events = unread_after
        if not self._seen.first_time(event.event_id):
            return []
        instance_id = event.instance_id
        if instance_id is None and event.worker_id is not None:
            instance_id = self.worker_instance.get(event.worker_id)
        if instance_id is None:
            return []  # a worker outside the fleet (or one that never said where it runs)
        record = self.instances.get(instance_id)
        if record is None:
            self._hold_unclaimed(instance_id, event)
            return []
        return self._apply_task(record, event, self._at(event.occurred_at, now))

    def _apply_task(self, record: InstanceRecord, event: TaskEvent, at_s: float) -> list[Transition]:
        if self._repeats_completion(event):
            return []
        transitions: list[Transition] = []
        instance_id = record.instance_id
        worker = event.worker_id or f"instance-{instance_id}"
        if record.state in (S.REQUESTED, S.LOADING, S.RUNNING) or (record.state == S.RESUMING and not _proven(record)):
            transitions += self._move(record, S.REGISTERED, at_s, f"first task event from {worker}")
        if event.worker_id is not None and event.worker_id not in self.worker_instance:
            self.worker_instance[event.worker_id] = instance_id
            record.workers.append(event.worker_id)
            if len(record.workers) > MAX_WORKERS_PER_INSTANCE:
                # a job system naming a worker per task would grow the record (and its saved copy) for ever
                oldest = record.workers.pop(0)
                if self.worker_instance.get(oldest) == instance_id:
                    del self.worker_instance[oldest]
        if record.gpu_model is None and (known := gpu_models.find(event.gpu_model)) is not None:
            # vast did not name the GPU: the worker's word is taken only for a model the catalogue knows, so that
            # the job system's string (a newline, an escape sequence, markup) does not become the machine's model
            record.gpu_model = known.name
        if record.last_task_at_s is None or at_s > record.last_task_at_s:
            record.last_task_at_s = at_s
        if record.state == S.PRODUCING:
            self._producer_spoke(at_s)
        if event.kind == "completed":
            record.tasks_completed += 1
            record.count_completion(at_s, self.config.throughput_window_s)
            if record.state in (S.REGISTERED, S.BENCHMARKED):
                transitions += self._move(record, S.PRODUCING, at_s, f"first completed task ({event.task_id})")
                self._producer_spoke(at_s)
            elif record.state == S.RESUMING and at_s >= record.state_since_s:
                # the same machine and disk: its benchmark still holds, a completed task proves it is back
                transitions += self._move(record, S.PRODUCING, at_s, f"resumed: completed {event.task_id}")
                self._producer_spoke(at_s)
        self._touch(record)
        return transitions

    def _repeats_completion(self, event: TaskEvent) -> bool:
        """Whether this completion was reported already (resent under a fresh event id; counted if so)."""
        if event.kind != "completed" or self._completed.first_report(
            event.task_type, event.task_id, event.occurred_at, event.worker_id, event.instance_id
        ):
            return False
        self.refused_task_events[TaskEventRefusal.REPEATED_COMPLETION] += 1
        return True

    def _hold_unclaimed(self, instance_id: int, event: TaskEvent) -> None:
        held = self.unclaimed.get(instance_id)
        if held is None:
            held = self.unclaimed[instance_id] = []
            if len(self.unclaimed) > UNCLAIMED_INSTANCES_KEPT:
                self.unclaimed.popitem(last=False)
        held.append(event.without_unknown_fields())  # kept for a while: what a producer adds is not
        if len(held) > UNCLAIMED_EVENTS_KEPT:
            del held[1]

    def observe_bench(self, result: BenchResult, now: datetime) -> list[Transition]:
        if result.kind != "gpu" or result.instance_id is None:
            return []
        record = self.instances.get(result.instance_id)
        if record is None:
            return []
        at_s = self._at(result.occurred_at, now)
        record.bench_verdict = result.verdict
        self._touch(record)
        detail = f"bench {result.verdict}: {result.explanation[:200]}"
        if result.verdict == "unknown":
            # no report came: nothing was judged, so nothing moves (a producing machine keeps producing, an
            # arriving one is still judged by time in state); bench keeps waiting and alerts
            return []
        if result.verdict == "fail":
            return self._move(record, S.FAILED, at_s, detail, FailureReason.BENCH_FAILED)
        return self._move(record, S.BENCHMARKED, at_s, detail)

    def drain(self, command: DrainInstance, now: datetime) -> list[Transition]:
        record = self.instances.get(command.instance_id)
        if record is None:
            return []
        at_s = self._at(command.occurred_at, now)
        return self._move(record, S.DRAINING, at_s, f"drain ({command.reason.value}, by {command.requested_by})")

    def observe_queue(self, snapshot: QueueSnapshot, now: datetime) -> None:
        at_s = self._at(snapshot.occurred_at, now)
        if self.queue_at_s is not None and at_s < self.queue_at_s:
            return
        pending = sum(depth.pending for depth in snapshot.queues)
        if pending > 0 and not self.queue_pending:
            self.queued_since_s = at_s
        elif pending == 0:
            self.queued_since_s = None
        self.queue_pending, self.queue_at_s = pending, at_s

    # ---- time -----------------------------------------------------------------------------------------------
    def check(self, now: datetime) -> Tick:
        """Judge time in state: stuck loading, never registered, silent (dead); forget long-gone instances."""
        now_s = now.timestamp()
        transitions: list[Transition] = []
        while self._deadlines and self._deadlines[0][0] <= now_s:
            _, _, instance_id, state = heapq.heappop(self._deadlines)
            record = self.instances.get(instance_id)
            if record is None or record.state != state:
                continue  # it moved on since this deadline was set
            due_s, reason, detail = self._due(record, now_s)
            if due_s > now_s:
                self._schedule(record, due_s)
            elif state == S.GONE:
                self._forget(record)
            elif reason is not None:
                transitions += self._move(record, S.FAILED, now_s, detail, reason)
        return Tick(transitions, self._silence(now_s))

    def behind_on_tasks(self) -> bool:
        """Whether so many task events wait unread that silence by the clock says nothing of a worker: a fleet
        slowed by a loaded machine read them thousands behind, and failed producers that were working as dead."""
        return self.unread_task_events > self.config.silence_unjudged_above_unread

    def tasks_queued(self, now_s: float) -> bool:
        return bool(
            self.queue_pending and self.queue_at_s is not None and now_s - self.queue_at_s <= self.config.queue_stale_s
        )

    # ---- outputs ---------------------------------------------------------------------------------------------
    def snapshot(self, now: datetime) -> FleetSnapshot:
        now_s = now.timestamp()
        shown = [record for _, record in sorted(self.instances.items()) if record.state is not S.GONE]
        lines, spend = self._lines.lines(shown, now_s, self.config.throughput_window_s)
        return FleetSnapshot(
            occurred_at=now,
            source=SOURCE,
            instances=lines,
            counts_by_state={state: n for state, n in self.counts.items() if n and state != S.GONE},
            spend_usd_per_h=round(spend, 6),
            producing_instances=self.counts[S.PRODUCING],
            arriving_instances=sum(self.counts[state] for state in ARRIVING),
            bid_outcomes=self.bids.outcomes(now.timestamp()),
            park_outcomes=self.parks.outcomes(now.timestamp()),
        )

    # ---- restore (services/fleet/saved.py reads the saved state back through these) ----------------------
    def adopt(self, record: InstanceRecord) -> None:
        """One saved record back in the books, its deadline re-armed."""
        self.instances[record.instance_id] = record
        if record.state != S.GONE:
            self.counts[record.state] += 1
        for worker in record.workers:
            self.worker_instance[worker] = record.instance_id
        self._schedule(record, self._first_deadline(record))

    def resume_after_restart(self, now_s: float) -> None:
        """Bids re-booked from the records; silence measured from now."""
        for record in self.instances.values():
            self._book_bid(record, now_s)
        # task events seen while we were down may not all have been saved: give every worker a fresh hearing
        self.watching_since_s = now_s
        self.changed = True

    # ---- internals ----------------------------------------------------------------------------------------
    def _at(self, occurred_at: datetime, now: datetime) -> float:
        """An event's moment, never in the future (a producer's clock running ahead)."""
        return min(occurred_at.timestamp(), now.timestamp())

    def _new(self, instance_id: int, state: InstanceState, at_s: float) -> InstanceRecord:
        record = InstanceRecord(instance_id=instance_id, state=state, created_at_s=at_s, state_since_s=at_s)
        self.instances[instance_id] = record
        return record

    def _touch(self, record: InstanceRecord) -> None:
        self.dirty.add(record.instance_id)

    def _update_attributes(self, record: InstanceRecord, observed: InstanceObserved) -> None:
        record.price_usd_per_h = observed.price_usd_per_h
        if observed.storage_usd_per_h is not None:
            record.storage_usd_per_h = observed.storage_usd_per_h
        if observed.state == S.PARKED and (record.state == S.PARKED or allowed(record.state, S.PARKED)):
            # the provisioner names the reason; an older one without it only parked on our own stop
            record.park_reason = observed.park_reason or ParkReason.STOPPED
        record.num_gpus = observed.num_gpus
        record.gpu_model = observed.gpu_model or record.gpu_model
        record.host_id = observed.host_id if observed.host_id is not None else record.host_id
        record.machine_id = observed.machine_id if observed.machine_id is not None else record.machine_id
        record.vast_status = observed.vast_actual_status
        record.label = observed.label or record.label
        record.interruptible = observed.interruptible or record.interruptible
        self.changed = True

    def _enter(
        self,
        record: InstanceRecord,
        from_state: InstanceState | None,
        to_state: InstanceState,
        at_s: float,
        detail: str,
        planned: bool = False,
    ) -> Transition:
        """Book-keeping shared by a first sighting and a move: counts, history, deadlines. `planned`: our own
        command removed it, so its going wakes the decider at P1, not as a failure."""
        self._book_park(record, from_state, to_state, at_s)
        if from_state is not None and from_state != S.GONE:
            self.counts[from_state] -= 1
        if to_state != S.GONE:
            self.counts[to_state] += 1
        if from_state == S.PARKED and record.first_producing_s is None:
            record.parked_before_producing_s += max(0.0, at_s - record.state_since_s)
        record.state, record.state_since_s = to_state, at_s
        if to_state != S.FAILED:
            record.failure_reason = None
        if to_state != S.PARKED:
            record.park_reason = None
        if to_state == S.PRODUCING:
            record.producing_since_s = at_s
            if record.first_producing_s is None:
                record.first_producing_s = at_s
            self.producing_entered_s = max(self.producing_entered_s or at_s, at_s)
        record.history.append(HistoryEntry(at_s, from_state, to_state, detail, True))
        self._book_bid(record, at_s)
        if to_state == S.PARKED and record.park_reason is ParkReason.OUTBID:
            self.bids.pause(record.bid_model or record.gpu_model or UNKNOWN_GPU_MODEL, at_s)
        visit = sum(1 for entry in record.history if entry.applied and entry.to_state == to_state)
        self._schedule(record, self._first_deadline(record))
        self._touch(record)
        self.changed = True
        priority, reason = trigger_for(from_state, to_state, record.failure_reason, record.park_reason, planned=planned)
        return Transition(
            instance_id=record.instance_id,
            from_state=from_state,
            to_state=to_state,
            at=_utc(at_s),
            failure_reason=record.failure_reason,
            detail=detail[:500],
            gpu_model=record.gpu_model,
            price_usd_per_h=record.price_usd_per_h,
            host_id=record.host_id,
            machine_id=record.machine_id,
            park_reason=record.park_reason,
            visit=visit,
            trigger_priority=priority,
            trigger_reason=reason,
        )

    def _move(
        self,
        record: InstanceRecord,
        to_state: InstanceState,
        at_s: float,
        detail: str,
        reason: FailureReason | None = None,
        planned: bool = False,
    ) -> list[Transition]:
        from_state = record.state
        if to_state == from_state:
            return []
        if not allowed(from_state, to_state):
            kind = "backwards" if is_backwards(from_state, to_state) else "not allowed"
            self._ignore(record, HistoryEntry(at_s, from_state, to_state, f"ignored ({kind}): {detail}", False))
            return []
        if to_state == S.FAILED:
            record.failure_reason = reason
        # a late event cannot date a move before the state it leaves began
        return [self._enter(record, from_state, to_state, max(at_s, record.state_since_s), detail, planned)]

    def _ignore(self, record: InstanceRecord, entry: HistoryEntry) -> None:
        last = record.history[-1] if record.history else None
        repeated = last is not None and (last.from_state, last.to_state) == (entry.from_state, entry.to_state)
        if repeated and last is not None and not last.applied:
            return  # the provisioner repeating itself every poll is one record, not hundreds
        record.history.append(entry)
        self.ignored_moves += 1
        ignored = [i for i, e in enumerate(record.history) if not e.applied]
        if len(ignored) > self.config.ignored_moves_kept:
            del record.history[ignored[0]]
        self._touch(record)

    def _book_park(
        self, record: InstanceRecord, from_state: InstanceState | None, to_state: InstanceState, at_s: float
    ) -> None:
        """How a park by our own stop ended, before the record moves on: resumed (the start produced again or
        at least ran), its GPU taken (fleet failed the start for it), or given back while parked. An outbid pause
        is the market's, not ours, and is booked with the bids."""
        if from_state == S.PARKED and record.park_reason is not ParkReason.OUTBID:
            if to_state == S.RESUMING:
                self.resuming_parked_s[record.instance_id] = at_s - record.state_since_s
            elif to_state == S.GONE:
                self.parks.book("given_back", at_s - record.state_since_s, at_s)
            return
        if from_state != S.RESUMING or to_state in (S.PARKED, S.RESUMING):
            return
        parked_s = self.resuming_parked_s.pop(record.instance_id, None)
        if parked_s is None:
            return  # an outbid bid resumed by vast, or a start begun before fleet restarted
        taken = to_state == S.FAILED and record.failure_reason is FailureReason.GPU_TAKEN
        if to_state != S.GONE or taken:
            self.parks.book("taken" if taken else "resumed", parked_s, at_s)

    def _book_bid(self, record: InstanceRecord, at_s: float) -> None:
        """Keep the bid book's exposed counts in step with the record: a bid is exposed to the market in every
        state but failed, gone and parked by our own stop."""
        exposed = record.interruptible and not (
            record.state in (S.FAILED, S.GONE)
            or (record.state == S.PARKED and record.park_reason is not ParkReason.OUTBID)
        )
        booked_under = (record.gpu_model or UNKNOWN_GPU_MODEL) if exposed else None
        if booked_under == record.bid_model:
            return
        if record.bid_model is not None:
            self.bids.expose(record.bid_model, -1, at_s)
        if booked_under is not None:
            self.bids.expose(booked_under, +1, at_s)
        record.bid_model = booked_under

    def _first_deadline(self, record: InstanceRecord) -> float:
        """A lower bound of when this state could need action (refined when it comes due)."""
        limit_s = first_limit_s(record.state, self.config)
        return float("inf") if limit_s is None else record.state_since_s + limit_s

    def _schedule(self, record: InstanceRecord, due_s: float) -> None:
        if due_s != float("inf"):
            heapq.heappush(self._deadlines, (due_s, next(self._order), record.instance_id, record.state))

    def _due(self, record: InstanceRecord, now_s: float) -> tuple[float, FailureReason | None, str]:
        """When the state's time limit (lifecycle.TIME_LIMITS) runs out, the failure it means, and why."""
        limit = time_limit(record.state, record.vast_status)
        if limit is None:
            return float("inf"), None, ""
        limit_s = limit.limit_s(self.config)
        start_s = record.state_since_s
        if limit.counts_from is not CountsFrom.IN_STATE:
            if not self.tasks_queued(now_s):  # nothing waiting: silence means nothing, look again later
                soon = limit.counts_from is CountsFrom.SILENT_WHILE_QUEUED_LOOK_SOON
                return now_s + (min(limit_s, IDLE_RECHECK_S) if soon else limit_s), None, ""
            if self.behind_on_tasks():  # what it said may be among the unread events: judged once they are read
                return now_s + IDLE_RECHECK_S, None, ""
            start_s = self._last_heard_s(record)
        detail = limit.detail.format(
            state=record.state.value,
            status=(record.vast_status or "stopped").lower(),
            limit_h=limit_s / 3600,
            limit_min=limit_s / 60,
            pending=self.queue_pending,
        )
        return start_s + limit_s, limit.reason, detail

    def _last_heard_s(self, record: InstanceRecord) -> float:
        """Since when silence counts: its last task, its state's start, the queue filling, or fleet watching."""
        since = record.state_since_s
        return max(record.last_task_at_s or since, since, self.queued_since_s or since, self.watching_since_s or since)

    def _forget(self, record: InstanceRecord) -> None:
        del self.instances[record.instance_id]
        for worker in record.workers:
            if self.worker_instance.get(worker) == record.instance_id:
                del self.worker_instance[worker]
        self.dirty.discard(record.instance_id)
        self.purged.add(record.instance_id)

    def _producer_spoke(self, at_s: float) -> None:
        if self.last_producer_event_s is None or at_s > self.last_producer_event_s:
            self.last_producer_event_s = at_s

    def _silence(self, now_s: float) -> list[Alert]:
        """One alert per episode of every producer silent while tasks are queued."""
        if self.counts[S.PRODUCING] == 0 or not self.tasks_queued(now_s):
            self.silence_alerted = False
            return []
        if self.behind_on_tasks():
            return []  # what they said may be among the unread events
        heard_s = max(
            self.last_producer_event_s or 0.0,
            self.queued_since_s or 0.0,
            self.producing_entered_s or 0.0,
            self.watching_since_s or 0.0,
        )
        silent_s = now_s - heard_s
        if silent_s < self.config.all_silent_s:
            self.silence_alerted = False
            return []
        if self.silence_alerted:
            return []
        self.silence_alerted = True
        detail = (
            f"all {self.counts[S.PRODUCING]} producing instances silent for {silent_s / 60:.0f} min"
            f" with {self.queue_pending} tasks queued"
        )
        return [Alert(TriggerReason.ALL_PRODUCERS_SILENT, detail, _utc(now_s))]


def _utc(at_s: float) -> datetime:
    return datetime.fromtimestamp(at_s, UTC)


def _proven(record: InstanceRecord) -> bool:
    """It produced or passed its benchmark before it was parked: the same machine needs no new benchmark."""
    return record.producing_since_s is not None or record.bench_verdict in ("pass", "degraded")
