"""One instance as fleet keeps it: its state, history and attributes, and how it is saved and restored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.contract import FailureReason, InstanceState, ParkReason

S = InstanceState


@dataclass(frozen=True)
class HistoryEntry:
    at_s: float
    from_state: InstanceState | None
    to_state: InstanceState
    detail: str
    applied: bool  # False: a move the table does not allow (backwards or sideways), recorded and ignored

    def to_list(self) -> list[Any]:
        from_state = self.from_state.value if self.from_state else None
        return [self.at_s, from_state, self.to_state.value, self.detail, self.applied]

    @classmethod
    def from_list(cls, values: list[Any]) -> HistoryEntry:
        at_s, from_state, to_state, detail, applied = values
        return cls(at_s, S(from_state) if from_state else None, S(to_state), detail, applied)


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
        if self.tasks_completed == 0 or self.state in (S.GONE, S.FAILED):
            return None
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "state": self.state.value,
            "created_at_s": self.created_at_s,
            "state_since_s": self.state_since_s,
            "failure_reason": self.failure_reason.value if self.failure_reason else None,
            "history": [entry.to_list() for entry in self.history],
            "gpu_model": self.gpu_model,
            "num_gpus": self.num_gpus,
            "price_usd_per_h": self.price_usd_per_h,
            "storage_usd_per_h": self.storage_usd_per_h,
            "park_reason": self.park_reason.value if self.park_reason else None,
            "host_id": self.host_id,
            "machine_id": self.machine_id,
            "vast_status": self.vast_status,
            "label": self.label,
            "workers": self.workers,
            "last_task_at_s": self.last_task_at_s,
            "tasks_completed": self.tasks_completed,
            "producing_since_s": self.producing_since_s,
            "first_producing_s": self.first_producing_s,
            "bench_verdict": self.bench_verdict,
            "interruptible": self.interruptible,
            "window": [self.window_start_s, self.window_count, self.previous_window_count],
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> InstanceRecord:
        window_start_s, window_count, previous_window_count = values["window"]
        reason = values["failure_reason"]
        park_reason = values.get("park_reason")  # absent in records saved before parking existed
        return cls(
            instance_id=values["instance_id"],
            state=S(values["state"]),
            created_at_s=values["created_at_s"],
            state_since_s=values["state_since_s"],
            failure_reason=FailureReason(reason) if reason else None,
            history=[HistoryEntry.from_list(entry) for entry in values["history"]],
            gpu_model=values["gpu_model"],
            num_gpus=values["num_gpus"],
            price_usd_per_h=values["price_usd_per_h"],
            storage_usd_per_h=values.get("storage_usd_per_h"),
            park_reason=ParkReason(park_reason) if park_reason else None,
            host_id=values["host_id"],
            machine_id=values["machine_id"],
            vast_status=values["vast_status"],
            label=values["label"],
            workers=list(values["workers"]),
            last_task_at_s=values["last_task_at_s"],
            tasks_completed=values["tasks_completed"],
            producing_since_s=values["producing_since_s"],
            # absent in records saved before parking: a machine that produced then, produced first by then
            first_producing_s=values.get("first_producing_s", values["producing_since_s"]),
            bench_verdict=values["bench_verdict"],
            interruptible=values.get("interruptible", False),  # absent in records saved before bids were booked
            window_start_s=window_start_s,
            window_count=window_count,
            previous_window_count=previous_window_count,
        )
