"""The demand state rules: from measured numbers to one DemandState with a sentence a person can check.

The order matters: "work waiting and nobody completing it" is judged before anything else, so dead workers
with a full queue can never read as `idle` (the incident that stopped a fleet with 59 tasks queued).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.demand.config import DemandSettings
from shared.contract import DemandState, DemandTrend


@dataclass
class Measurement:
    pending: int
    running: int
    by_type_queue: dict[str, tuple[int, int]]
    short_window_s: int
    short_arrivals: int
    short_arrival_rate_per_h: float
    sustained_arrival_rate_per_h: float
    peak_arrival_rate_per_h: float  # highest rate over the windows up to the over-provisioning look-back
    producing_workers: int  # distinct producers (core.producer_key) with a completion in the short window
    fleet_producing: int | None  # None without a fresh fleet snapshot
    fleet_ready: int | None
    capacity_workers: int
    per_worker_throughput_tasks_per_h: float | None  # None until measured
    capacity_tasks_per_h: float
    backlog_worker_hours: float
    workers_expected: bool
    trend_relative_change: float  # arrival change across the trend window, relative to its mean rate
    trend_arrivals: int
    trend_slope_per_h2: float
    above_capacity_for_s: float = 0.0
    without_completion_s: float = 0.0  # since the later of the last completion and work starting to wait
    unread_task_events: int = 0  # still waiting on demand's consumer after the latest one read

    @property
    def work_waiting(self) -> bool:
        return self.pending > 0 or self.short_arrivals > 0

    @property
    def per_worker_used_tasks_per_h(self) -> float:
        return self.capacity_tasks_per_h / self.capacity_workers if self.capacity_workers else 0.0


def _numbers(m: Measurement, c: DemandSettings) -> str:
    per_worker = m.per_worker_throughput_tasks_per_h
    if per_worker is not None:
        per_worker_text = f"{per_worker:.0f}/h measured"
    else:
        per_worker_text = f"{c.default_worker_throughput_tasks_per_h:.0f}/h assumed"
    return (
        f"arrivals {m.short_arrival_rate_per_h:.0f}/h over {m.short_window_s // 60} min"
        f" (sustained {m.sustained_arrival_rate_per_h:.0f}/h), capacity {m.capacity_tasks_per_h:.0f}/h"
        f" ({m.capacity_workers} workers x {per_worker_text}), {m.pending} pending ="
        f" {m.backlog_worker_hours:.2f} worker-h, {m.running} running"
    )


def classify(m: Measurement, c: DemandSettings) -> tuple[DemandState, str]:
    numbers = _numbers(m, c)
    caught_up = m.unread_task_events <= c.stall_unjudged_above_unread  # else the completions may be unread
    if m.work_waiting and m.workers_expected and m.without_completion_s >= c.stall_after_s and caught_up:
        if m.fleet_producing is not None:
            expected = f"fleet reports {m.fleet_producing} producing and {m.fleet_ready} ready"
        else:
            expected = "workers completed tasks earlier"
        return DemandState.WORKERS_STALLED, (
            f"workers stalled: {m.pending} tasks pending, {m.short_arrivals} arrived in the last"
            f" {m.short_window_s // 60} min, no completion for {m.without_completion_s / 60:.0f} min although"
            f" workers are expected ({expected}); {numbers}"
        )
    if m.pending == 0 and m.running == 0 and m.short_arrivals == 0:
        return DemandState.IDLE, f"idle: no arrivals in the last {m.short_window_s // 60} min and an empty queue"
    if m.above_capacity_for_s >= c.sustain_s:
        return DemandState.UNDER_PROVISIONED, (
            f"under-provisioned: arrivals above capacity for {m.above_capacity_for_s / 60:.0f} min; {numbers}"
        )
    if m.capacity_workers == 0 and m.work_waiting and m.running == 0:
        return DemandState.UNDER_PROVISIONED, f"under-provisioned: work waiting and no worker at all; {numbers}"
    if m.backlog_worker_hours > m.capacity_workers * c.max_backlog_drain_h:
        return DemandState.UNDER_PROVISIONED, (
            f"under-provisioned: the backlog takes the producing workers over {c.max_backlog_drain_h:g} h"
            f" (a machine's startup time); {numbers}"
        )
    fewer = m.capacity_workers - 1
    if (
        fewer >= 1
        and m.above_capacity_for_s == 0
        and fewer * m.per_worker_used_tasks_per_h >= c.over_provisioned_headroom * m.peak_arrival_rate_per_h
        and m.backlog_worker_hours <= fewer * c.over_provisioned_max_drain_h
    ):
        return DemandState.OVER_PROVISIONED, (
            f"over-provisioned: {fewer} workers would still carry {c.over_provisioned_headroom:g}x the peak"
            f" recent arrival rate {m.peak_arrival_rate_per_h:.0f}/h; {numbers}"
        )
    return DemandState.SERVED, f"served: {numbers}"


def next_trend(previous: DemandTrend, relative_change: float, arrivals: int, c: DemandSettings) -> DemandTrend:
    """Rising/falling with hysteresis: easy to keep, harder to enter, so minute noise does not flip it."""
    if arrivals < c.trend_min_arrivals:
        return DemandTrend.STEADY
    if previous == DemandTrend.RISING and relative_change > c.trend_leave_ratio:
        return DemandTrend.RISING
    if previous == DemandTrend.FALLING and relative_change < -c.trend_leave_ratio:
        return DemandTrend.FALLING
    if relative_change >= c.trend_enter_ratio:
        return DemandTrend.RISING
    if relative_change <= -c.trend_enter_ratio:
        return DemandTrend.FALLING
    return DemandTrend.STEADY
