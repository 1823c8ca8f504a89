"""One instance as fleet keeps it: its state, history and attributes (saved as they are: services/fleet/saved.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.contract import FailureReason, InstanceState, ParkReason

S = InstanceState


@dataclass(frozen=True)
class HistoryEntry:
    at_s: float
    from_state: InstanceState | None
    to_state: InstanceState
    detail: str
    applied: bool  # False: a move the table does not allow (backwards or sideways), recorded and ignored


@dataclass
class InstanceRecord:
    instance_id: int
    state: InstanceState
    created_at_s: float
    state_since_s: float
    failure_reason: FailureReason | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    gpu_model: str | None = None
    num_gpus: int = 1
    price_usd_per_h: float = 0.0
    storage_usd_per_h: float | None = None
    park_reason: ParkReason | None = None
    host_id: int | None = None
    machine_id: int | None = None
    vast_status: str | None = None
    label: str | None = None
    workers: list[str] = field(default_factory=list)
    last_task_at_s: float | None = None
    tasks_completed: int = 0
    producing_since_s: float | None = None
    # the first time it produced: a resumed machine produces again days after its creation, which is no startup
    first_producing_s: float | None = None
    # a machine parked once it had loaded, before it produced: its wait parked is no part of its startup
    parked_before_producing_s: float = 0.0
    bench_verdict: str | None = None
    interruptible: bool = False  # a bid: paused whenever outbid
    bid_model: str | None = None  # the GPU model its exposure to the market is booked under; None: not exposed
    # completions in the current and previous throughput window (a sliding-window estimate)
    window_start_s: float = 0.0
    window_count: int = 0
    previous_window_count: int = 0

    def count_completion(self, at_s: float, window_s: float) -> None:
        start_s, current, previous = self._rolled(at_s, window_s)
        if at_s >= start_s:
            current += 1
        elif at_s >= start_s - window_s:
            previous += 1  # a late completion still belongs to the previous window
        self.window_start_s, self.window_count, self.previous_window_count = start_s, current, previous

    def throughput_tasks_per_h(self, now_s: float, window_s: float) -> float | None:
        """Tasks/h over the last window: the previous window's count weighted by how much of it still overlaps."""
        if self.tasks_completed == 0 or self.state is S.GONE or self.state is S.FAILED:
            return None
        start_s = self.window_start_s
        if now_s < start_s + window_s:  # `_rolled`'s common case, read in place: every line of every snapshot
            current, previous = self.window_count, self.previous_window_count
        else:
            start_s, current, previous = self._rolled(now_s, window_s)
        overlap = max(0.0, 1.0 - (now_s - start_s) / window_s)
        estimate = current + previous * overlap
        since_s = self.producing_since_s if self.producing_since_s is not None else self.created_at_s
        span_s = min(window_s, max(now_s - since_s, 60.0))
        return estimate * 3600 / span_s

    def _rolled(self, at_s: float, window_s: float) -> tuple[float, int, int]:
        """The throughput windows as they stand at `at_s` (aligned to the window length)."""
        start_s = self.window_start_s
        if at_s < start_s + window_s:
            return start_s, self.window_count, self.previous_window_count
        aligned_s = (at_s // window_s) * window_s
        previous = self.window_count if aligned_s - start_s < 2 * window_s else 0
        return aligned_s, 0, previous
