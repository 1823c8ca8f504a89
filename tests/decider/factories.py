"""Contract messages as demand and fleet publish them, built with plain numbers for the decider's tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.contract import (
    DemandSignal,
    DemandState,
    DemandTrend,
    FailureReason,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    WindowStats,
)

HOUR_S = 3600.0


def window(window_s: int, arrival_rate_per_h: float, trend_per_h2: float = 0.0) -> WindowStats:
    return WindowStats(
        window_s=window_s,
        arrival_rate_per_h=arrival_rate_per_h,
        completion_rate_per_h=arrival_rate_per_h,
        failure_rate_per_h=0.0,
        mean_task_duration_s=240.0,
        arrival_trend_per_h2=trend_per_h2,
    )


def signal(
    now: datetime,
    *,
    state: DemandState = DemandState.SERVED,
    pending: int = 0,
    running: int = 0,
    rate_per_h: float = 0.0,
    windows: list[WindowStats] | None = None,
    throughput_per_h: float | None = 120.0,
    producing_workers: int = 0,
    above_capacity_for_s: float = 0.0,
    trend: DemandTrend = DemandTrend.STEADY,
    age_s: float = 0.0,
) -> DemandSignal:
    capacity = producing_workers * (throughput_per_h or 0.0)
    return DemandSignal(
        occurred_at=now - timedelta(seconds=age_s),
        source="demand",
        state=state,
        explanation=f"test signal: {state.value}",
        trend=trend,
        pending_tasks=pending,
        running_tasks=running,
        windows=windows if windows is not None else [window(300, rate_per_h), window(1800, rate_per_h)],
        sustained_arrival_rate_per_h=rate_per_h,
        producing_workers=producing_workers,
        per_worker_throughput_tasks_per_h=throughput_per_h,
        fleet_capacity_tasks_per_h=capacity,
        backlog_worker_hours=pending / throughput_per_h if throughput_per_h else 0.0,
        above_capacity_for_s=above_capacity_for_s,
        signal_seq=1,
    )


def line(
    instance_id: int,
    state: InstanceState,
    now: datetime,
    *,
    created_ago_s: float = 3 * HOUR_S,
    state_for_s: float = 1.5 * HOUR_S,
    last_task_ago_s: float | None = 30.0,
    price_usd_per_h: float = 0.5,
    gpu_model: str = "RTX 4090",
    throughput_per_h: float | None = 120.0,
    failure_reason: FailureReason | None = None,
) -> InstanceLine:
    return InstanceLine(
        instance_id=instance_id,
        state=state,
        failure_reason=failure_reason,
        gpu_model=gpu_model,
        price_usd_per_h=price_usd_per_h,
        created_at=now - timedelta(seconds=created_ago_s),
        state_since=now - timedelta(seconds=state_for_s),
        last_task_at=None if last_task_ago_s is None else now - timedelta(seconds=last_task_ago_s),
        throughput_tasks_per_h=throughput_per_h if state is InstanceState.PRODUCING else None,
        line=f"#{instance_id} {gpu_model} {state.value} ${price_usd_per_h:.2f}/h",
    )


def producing(count: int, now: datetime, *, first_id: int = 100, **kwargs: object) -> list[InstanceLine]:
    return [line(first_id + i, InstanceState.PRODUCING, now, **kwargs) for i in range(count)]  # type: ignore[arg-type]


def loading(
    count: int, now: datetime, *, first_id: int = 500, created_ago_s: float = 600.0, gpu_model: str = "RTX 4090"
) -> list[InstanceLine]:
    return [
        line(first_id + i, InstanceState.LOADING, now, created_ago_s=created_ago_s, state_for_s=created_ago_s,
             last_task_ago_s=None, gpu_model=gpu_model)
        for i in range(count)
    ]  # fmt: skip


def snapshot(now: datetime, instances: list[InstanceLine], *, age_s: float = 0.0) -> FleetSnapshot:
    counts: dict[InstanceState, int] = {}
    for instance in instances:
        counts[instance.state] = counts.get(instance.state, 0) + 1
    arriving = {
        InstanceState.REQUESTED,
        InstanceState.LOADING,
        InstanceState.RUNNING,
        InstanceState.REGISTERED,
        InstanceState.BENCHMARKED,
    }
    return FleetSnapshot(
        occurred_at=now - timedelta(seconds=age_s),
        source="fleet",
        instances=instances,
        counts_by_state=counts,
        spend_usd_per_h=round(sum(i.price_usd_per_h for i in instances), 6),
        producing_instances=counts.get(InstanceState.PRODUCING, 0),
        arriving_instances=sum(n for state, n in counts.items() if state in arriving),
    )
