"""The shapes demand's core works with: its inputs and outputs (TaskCounts, IngestOutcome, Evaluation) and what it
keeps per worker, queue and fleet between events (saved by services/demand/saved.py)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from shared.contract import DemandSignal, DemandState, DemandTrend, TriggerPriority, TriggerReason
from shared.seen_ids import SeenIds


class IngestOutcome(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    TOO_LATE = "too_late"  # older than the longest window: counted, not applied
    REPEATED_COMPLETION = "repeated_completion"  # a task already completed, under a fresh event id: not applied


@dataclass(frozen=True)
class TriggerIntent:
    priority: TriggerPriority
    reason: TriggerReason
    detail: str


@dataclass(frozen=True)
class Evaluation:
    signal: DemandSignal
    publish: bool
    triggers: tuple[TriggerIntent, ...]


@dataclass(frozen=True)
class TaskCounts:
    """Aggregated task steps of one moment (a simulator's minute), for feeding the core without one event each."""

    at: datetime
    task_type: str = "default"
    submitted: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    duration_sum_s: float = 0.0
    durations: int = 0
    busy_completions: int = 0  # completions that followed the same producer's previous one while it had work
    busy_s: float = 0.0  # the producers' time those completions took
    gpu_model: str | None = None
    producers: tuple[str, ...] = ()  # producers (core.producer_key) that completed a task in this moment


class JournalledSeenIds(SeenIds):
    """Seen ids whose new ones are journalled, so the adapter can persist them cheaply."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._journal: deque[str] = deque(maxlen=capacity)

    def first_time(self, event_id: str) -> bool:
        new = super().first_time(event_id)
        if new:
            self._journal.append(event_id)
        return new

    def take_journal(self) -> list[str]:
        ids = list(self._journal)
        self._journal.clear()
        return ids

    def restore_journal(self, ids: list[str]) -> None:
        """Put back ids whose checkpoint failed, ahead of those journalled since."""
        self._journal.extendleft(reversed(ids))


# one completion of a worker: (occurred_at_s, task_type, gpu_model, whether tasks were waiting then)
TimelineEntry = tuple[float, str, str | None, bool]


@dataclass
class WorkerRecord:
    timeline: list[TimelineEntry] = field(default_factory=list)  # recent completions, oldest first
    gpu_model: str | None = None
    instance_id: int | None = None
    last_seen_s: float = 0.0
    # the worker's first completion and its run time, counted as busy time before it (core._busy); not saved
    lead: tuple[TimelineEntry, float] | None = None


@dataclass
class QueueView:
    at_s: float
    pending: dict[str, int]  # as counted: a rise not yet seen twice is held to a small step
    running: dict[str, int]
    reported_pending: dict[str, int] | None = None  # as the job system said it; None: same as `pending`

    def reported(self, task_type: str) -> int:
        source = self.pending if self.reported_pending is None else self.reported_pending
        return source.get(task_type, 0)


@dataclass
class FleetView:
    at_s: float
    producing: int
    ready: int  # registered or benchmarked: about to produce
    gpu_by_instance: dict[int, str]


@dataclass
class PublishedMark:
    at_s: float
    state: DemandState
    trend: DemandTrend
    pending: int
    capacity_tasks_per_h: float
