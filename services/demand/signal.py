"""What demand publishes: the DemandSignal built from the core's windows and one evaluation's measurement, and
whether it is worth publishing now (a material change, or the cadence)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from services.demand.config import HOUR_S, DemandSettings
from services.demand.records import PublishedMark
from services.demand.rules import Measurement
from services.demand.windows import ARRIVALS, COMPLETIONS, DURATION_SUM_S, DURATIONS, FAILURES, BucketSeries
from shared.contract import DemandSignal, DemandState, DemandTrend, TaskTypeDemand, WindowStats

if TYPE_CHECKING:
    from services.demand.core import DemandCore

SOURCE = "demand"


def worth_publishing(
    last: PublishedMark | None, now_s: float, state: DemandState, trend: DemandTrend, m: Measurement, c: DemandSettings
) -> bool:
    if last is None or now_s - last.at_s >= c.publish_interval_s or now_s < last.at_s:
        return True
    if state != last.state or trend != last.trend:
        return True
    if abs(m.pending - last.pending) >= max(c.material_pending_change, c.material_pending_ratio * last.pending):
        return True
    base = max(last.capacity_tasks_per_h, 1.0)
    return abs(m.capacity_tasks_per_h - last.capacity_tasks_per_h) / base >= c.material_capacity_ratio


def window_stats(core: DemandCore, series: BucketSeries, now_s: float) -> list[WindowStats]:
    stats = []
    for window_s in core.config.windows_s:
        i = core.window_index[window_s]
        per_h = HOUR_S / core.covered_s(window_s, now_s)
        durations = series.window_sum(i, DURATIONS)
        stats.append(
            WindowStats(
                window_s=window_s,
                arrival_rate_per_h=series.window_sum(i, ARRIVALS) * per_h,
                completion_rate_per_h=series.window_sum(i, COMPLETIONS) * per_h,
                failure_rate_per_h=series.window_sum(i, FAILURES) * per_h,
                mean_task_duration_s=series.window_sum(i, DURATION_SUM_S) / durations if durations else None,
                arrival_trend_per_h2=core.slope_per_h2(series, i, now_s),
            )
        )
    return stats


def signal_of(
    core: DemandCore, now: datetime, m: Measurement, state: DemandState, trend: DemandTrend, explanation: str
) -> DemandSignal:
    now_s = now.timestamp()
    by_type = [
        TaskTypeDemand(
            task_type=task_type,
            pending_tasks=m.by_type_queue.get(task_type, (0, 0))[0],
            running_tasks=m.by_type_queue.get(task_type, (0, 0))[1],
            windows=window_stats(core, series, now_s),
        )
        for task_type, series in sorted(core.by_type.items())
    ]
    by_gpu = {}
    for gpu_model, series in sorted(core.by_gpu.items()):
        throughput = core.throughput_of(series)
        if throughput is not None:
            by_gpu[gpu_model] = throughput
    last_completion = None if core.last_completion_s is None else datetime.fromtimestamp(core.last_completion_s, UTC)
    return DemandSignal(
        occurred_at=now,
        source=SOURCE,
        state=state,
        explanation=explanation[:500],
        trend=trend,
        pending_tasks=m.pending,
        running_tasks=m.running,
        windows=window_stats(core, core.overall, now_s),
        by_task_type=by_type,
        sustained_arrival_rate_per_h=m.sustained_arrival_rate_per_h,
        producing_workers=m.producing_workers,
        per_worker_throughput_tasks_per_h=m.per_worker_throughput_tasks_per_h,
        throughput_by_gpu_model_tasks_per_h=by_gpu,
        fleet_capacity_tasks_per_h=m.capacity_tasks_per_h,
        backlog_worker_hours=m.backlog_worker_hours,
        above_capacity_for_s=m.above_capacity_for_s,
        last_completion_at=last_completion,
        signal_seq=core.signal_seq,
        season=core.season_echo(now_s),
    )
