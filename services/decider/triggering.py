"""When the decider runs: P0 at once, P1 debounced, heartbeat, scheduled wake-ups, single flight, rate limit.

A pure state machine: every method takes `now`; it never reads a clock, sleeps or does I/O. The adapter
(`runner.py`) feeds it triggers, asks `poll(now)` for a batch to run and sleeps until `next_wake_at(now)`.
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.contract import TriggerRef

# What a run is labelled with in metrics and the audit, highest first: the most urgent reason wins.
RUN_LABELS = ("p0", "scheduled", "p1", "heartbeat")
MAX_WAKEUPS = 32  # an advisor asking for more wake-ups than this is looping; the earliest are kept


@dataclass(frozen=True)
class TriggerConfig:
    """Defaults from the issue: a P1 burst becomes one run after 20 s of quiet or 2 min at most."""

    p1_quiet_s: float = 20.0
    p1_max_delay_s: float = 120.0
    heartbeat_s: float = 300.0
    # runaway-loop stop: non-P0 runs per rolling hour; P0 runs are exempt up to their own cap, then count here
    max_runs_per_h: int = 20
    max_p0_runs_per_h: int = 120
    rate_window_s: float = 3600.0
    run_at_start: bool = True  # a (re)started decider missed whatever happened while it was down


@dataclass(frozen=True)
class RunBatch:
    """What one run starts with: every trigger that arrived since the last run, P0 first."""

    triggers: tuple[TriggerRef, ...]
    label: str

    @property
    def has_p0(self) -> bool:
        return any(ref.priority == "p0" for ref in self.triggers)

    @property
    def event_ids(self) -> frozenset[str]:
        return frozenset(ref.event_id for ref in self.triggers if ref.event_id)


def label_of(refs: tuple[TriggerRef, ...] | list[TriggerRef]) -> str:
    priorities = {ref.priority for ref in refs}
    return next((label for label in RUN_LABELS if label in priorities), "heartbeat")


@dataclass
class _Pending:
    ref: TriggerRef
    arrived_at: datetime


@dataclass
class TriggerScheduler:
    """Single flight within one process; `runner.py` adds the Redis lock for single flight across replicas."""

    config: TriggerConfig
    last_run_started_at: datetime | None = None
    running: bool = False
    suppressed_runs: Counter[str] = field(default_factory=Counter)
    _pending: list[_Pending] = field(default_factory=list)
    # refs of runs the rate limit refused: no longer a fresh reason to run, but seen by the run when a slot frees
    _deferred: list[_Pending] = field(default_factory=list)
    _p1_first_at: datetime | None = None
    _p1_last_at: datetime | None = None
    _wakeups: list[datetime] = field(default_factory=list)
    _retry_at: datetime | None = None  # the lock was busy or Redis down: try again then
    _normal_starts: deque[datetime] = field(default_factory=deque)
    _p0_starts: deque[datetime] = field(default_factory=deque)
    _heartbeat_base: datetime | None = None  # start of the current heartbeat period

    @classmethod
    def starting(cls, config: TriggerConfig, now: datetime) -> TriggerScheduler:
        scheduler = cls(config)
        # without run_at_start the first heartbeat comes one period after start-up
        scheduler._heartbeat_base = None if config.run_at_start else now
        return scheduler

    # --- inputs -------------------------------------------------------------------------------------------

    def offer(self, ref: TriggerRef, now: datetime) -> None:
        """A trigger arrived. During a run it waits for the one follow-up run, which sees it."""
        if ref.event_id and any(p.ref.event_id == ref.event_id for p in self._pending + self._deferred):
            return  # a redelivered trigger is one trigger
        self._pending.append(_Pending(ref, now))
        if ref.priority == "p1":
            if self._p1_first_at is None:
                self._p1_first_at = now
            self._p1_last_at = now

    def schedule_wakeup(self, at: datetime) -> None:
        """A run asked to be woken (schedule_next_check); every requested wake-up is kept until it fires."""
        if at in self._wakeups:
            return
        bisect.insort(self._wakeups, at)
        del self._wakeups[MAX_WAKEUPS:]

    @property
    def wakeups(self) -> tuple[datetime, ...]:
        return tuple(self._wakeups)

    @property
    def pending(self) -> tuple[TriggerRef, ...]:
        return tuple(p.ref for p in self._deferred + self._pending)

    @property
    def follow_up_pending(self) -> bool:
        """True when a trigger arrived during the current run: exactly one follow-up run will see it."""
        return self.running and bool(self._pending)

    # --- when to run --------------------------------------------------------------------------------------

    def _heartbeat_base_at(self) -> datetime | None:
        return max((t for t in (self._heartbeat_base, self.last_run_started_at) if t is not None), default=None)

    def _time_refs(self, now: datetime) -> list[TriggerRef]:
        """Time-driven reasons due now (heartbeat, wake-ups); triggers are already pending."""
        refs: list[TriggerRef] = []
        base = self._heartbeat_base_at()
        if base is None or now >= base + timedelta(seconds=self.config.heartbeat_s):
            refs.append(TriggerRef(priority="heartbeat"))
        if self._wakeups and self._wakeups[0] <= now:
            refs.append(TriggerRef(priority="scheduled"))
        return refs

    def _p1_due(self, now: datetime) -> bool:
        if self._p1_first_at is None or self._p1_last_at is None:
            return False
        quiet = now >= self._p1_last_at + timedelta(seconds=self.config.p1_quiet_s)
        too_long = now >= self._p1_first_at + timedelta(seconds=self.config.p1_max_delay_s)
        return quiet or too_long

    def _fresh_reason(self, now: datetime) -> bool:
        return any(p.ref.priority == "p0" for p in self._pending) or self._p1_due(now) or bool(self._time_refs(now))

    def _is_due(self, now: datetime) -> bool:
        if self._fresh_reason(now):
            return True
        if not self._deferred:
            return False
        self._prune_rate_windows(now)
        return self._slot(any(p.ref.priority == "p0" for p in self._deferred)) is not None

    def _prune_rate_windows(self, now: datetime) -> None:
        horizon = now - timedelta(seconds=self.config.rate_window_s)
        for starts in (self._normal_starts, self._p0_starts):
            while starts and starts[0] <= horizon:
                starts.popleft()

    def _slot(self, has_p0: bool) -> str | None:
        """Which rate window a run may use: P0 first uses its own cap, then competes for a normal slot."""
        if has_p0 and len(self._p0_starts) < self.config.max_p0_runs_per_h:
            return "p0"
        if len(self._normal_starts) < self.config.max_runs_per_h:
            return "normal"
        return None

    def poll(self, now: datetime) -> RunBatch | None:
        """The batch to run now, or None. A returned batch must be followed by `begin`, `abandon` or `skip`."""
        if self.running or (self._retry_at is not None and now < self._retry_at):
            return None
        if not self._is_due(now):
            return None
        self._prune_rate_windows(now)
        refs = [p.ref for p in self._deferred + self._pending] + self._time_refs(now)
        refs.sort(key=lambda r: RUN_LABELS.index(r.priority))
        if self._slot(any(r.priority == "p0" for r in refs)) is None:
            self._suppress(now, label_of([p.ref for p in self._pending] + self._time_refs(now)))
            return None
        self.running = True
        self._retry_at = None
        return RunBatch(tuple(refs), label_of(refs))

    def _suppress(self, now: datetime, label: str) -> None:
        """The rate limit refused a due run: count it once; its triggers wait for the run when a slot frees."""
        self.suppressed_runs[label] += 1
        for ref in self._time_refs(now):
            self._deferred.append(_Pending(ref, now))
        self._deferred.extend(self._pending)
        self._pending = []
        self._p1_first_at = self._p1_last_at = None
        self._heartbeat_base = now
        while self._wakeups and self._wakeups[0] <= now:
            self._wakeups.pop(0)

    def begin(self, batch: RunBatch, now: datetime) -> None:
        """The run holds the lock and starts: its triggers are consumed and it counts against the rate limit."""
        self._prune_rate_windows(now)
        (self._p0_starts if self._slot(batch.has_p0) == "p0" else self._normal_starts).append(now)
        self.last_run_started_at = now
        self._consume(batch, now)

    def _consume(self, batch: RunBatch, now: datetime) -> None:
        taken = {id(ref) for ref in batch.triggers}
        ids = batch.event_ids
        # triggers offered after poll() (while the lock was being taken) stay pending for the follow-up
        self._pending = [p for p in self._pending if id(p.ref) not in taken and p.ref.event_id not in ids]
        self._deferred = []
        p1_arrivals = [p.arrived_at for p in self._pending if p.ref.priority == "p1"]
        self._p1_first_at = min(p1_arrivals, default=None)
        self._p1_last_at = max(p1_arrivals, default=None)
        while self._wakeups and self._wakeups[0] <= now:
            self._wakeups.pop(0)
        self._heartbeat_base = now

    def finish(self, now: datetime) -> None:
        """The run ended; triggers that arrived meanwhile make the one follow-up run."""
        self.running = False

    def abandon(self, retry_at: datetime) -> None:
        """The lock was busy or Redis down: nothing ran; keep every trigger and retry at `retry_at`."""
        self.running = False
        self._retry_at = retry_at

    def skip(self, batch: RunBatch, now: datetime, covered_by_run_at: datetime | None) -> None:
        """Another replica's run (started at `covered_by_run_at`) already saw everything in this batch."""
        self.running = False
        if covered_by_run_at is not None:
            self.last_run_started_at = max(self.last_run_started_at or covered_by_run_at, covered_by_run_at)
        self._consume(batch, now)
        if covered_by_run_at is not None:
            self._heartbeat_base = covered_by_run_at

    def next_wake_at(self, now: datetime) -> datetime | None:
        """The earliest moment `poll` could return a batch without a new trigger arriving."""
        if self.running:
            return None
        if self._retry_at is not None and now < self._retry_at:
            return self._retry_at
        if self._is_due(now):
            return now
        base = self._heartbeat_base_at() or now
        candidates = [base + timedelta(seconds=self.config.heartbeat_s)]
        if self._wakeups:
            candidates.append(self._wakeups[0])
        if self._p1_first_at is not None and self._p1_last_at is not None:
            quiet_at = self._p1_last_at + timedelta(seconds=self.config.p1_quiet_s)
            candidates.append(min(quiet_at, self._p1_first_at + timedelta(seconds=self.config.p1_max_delay_s)))
        if self._deferred:
            candidates.append(self._slot_frees_at(now))
        return max(now, min(candidates))

    def _slot_frees_at(self, now: datetime) -> datetime:
        self._prune_rate_windows(now)
        window = timedelta(seconds=self.config.rate_window_s)
        frees = [starts[0] + window for starts in (self._normal_starts, self._p0_starts) if starts]
        return min(frees, default=now)


def uncovered(
    batch: RunBatch,
    *,
    covered_event_ids: frozenset[str],
    last_run_elsewhere_at: datetime | None,
    now: datetime,
    heartbeat_s: float,
) -> tuple[TriggerRef, ...]:
    """The refs of `batch` that no other replica's run has already seen.

    A trigger is covered when a run recorded its event id; a heartbeat when some run started within the
    heartbeat period; a wake-up when a run started at or after it was due (every run reads fresh inputs).
    """
    kept: list[TriggerRef] = []
    for ref in batch.triggers:
        if ref.event_id is not None:
            if ref.event_id not in covered_event_ids:
                kept.append(ref)
        elif ref.priority == "heartbeat":
            if last_run_elsewhere_at is None or last_run_elsewhere_at < now - timedelta(seconds=heartbeat_s):
                kept.append(ref)
        elif ref.priority == "scheduled":
            if last_run_elsewhere_at is None or last_run_elsewhere_at < now:
                kept.append(ref)
        else:
            kept.append(ref)
    return tuple(kept)
