"""One realistic situation in contract models (demand outrunning a two-machine fleet), for the smoke run, the
soak benchmark and tests: arrivals above capacity for 1.5 h, 340 tasks pending."""

from __future__ import annotations

from datetime import datetime, timedelta

from services.decider.policy.forecast import ARRIVING_STATES
from shared.contract import (
    DemandSignal,
    DemandState,
    DemandTrend,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    OfferLine,
    OfferList,
    WindowStats,
)


def demand_signal(
    now: datetime,
    *,
    state: DemandState = DemandState.UNDER_PROVISIONED,
    pending: int = 340,
    running: int = 18,
    arrivals_per_h: float = 410.0,
    capacity_per_h: float = 240.0,
    producing: int = 2,
) -> DemandSignal:
    def window(window_s: int, arrivals: float, failures: float, trend: float) -> WindowStats:
        return WindowStats(
            window_s=window_s,
            arrival_rate_per_h=arrivals,
            completion_rate_per_h=capacity_per_h,
            failure_rate_per_h=failures,
            mean_task_duration_s=240,
            arrival_trend_per_h2=trend,
        )

    return DemandSignal(
        occurred_at=now,
        source="demand",
        state=state,
        explanation=f"arrivals {arrivals_per_h:.0f}/h exceed capacity {capacity_per_h:.0f}/h",
        trend=DemandTrend.RISING,
        pending_tasks=pending,
        running_tasks=running,
        windows=[window(300, arrivals_per_h, 0, 12), window(3600, arrivals_per_h * 0.9, 1, 8)],
        sustained_arrival_rate_per_h=arrivals_per_h,
        producing_workers=producing,
        per_worker_throughput_tasks_per_h=120.0,
        fleet_capacity_tasks_per_h=capacity_per_h,
        backlog_worker_hours=round(pending / 120.0, 2),
        above_capacity_for_s=5400,
        last_completion_at=now - timedelta(minutes=1),
        signal_seq=7,
    )


def instance_line(
    now: datetime,
    instance_id: int,
    state: InstanceState = InstanceState.PRODUCING,
    gpu_model: str = "RTX 4090",
    price: float = 0.50,
    throughput: float | None = 118.0,
    label: str = "",
) -> InstanceLine:
    producing = state == InstanceState.PRODUCING
    rate = f" {throughput:.0f} tasks/h" if throughput is not None and producing else ""
    return InstanceLine(
        instance_id=instance_id,
        state=state,
        gpu_model=gpu_model,
        price_usd_per_h=price,
        created_at=now - timedelta(hours=3),
        state_since=now - timedelta(hours=1),
        throughput_tasks_per_h=throughput if producing else None,
        line=f"#{instance_id} {gpu_model} {state.value} ${price:.2f}/h 2.3h up{rate}{label}",
    )


def fleet_snapshot(now: datetime, instances: list[InstanceLine]) -> FleetSnapshot:
    counts: dict[InstanceState, int] = {}
    for line in instances:
        counts[line.state] = counts.get(line.state, 0) + 1
    return FleetSnapshot(
        occurred_at=now,
        source="fleet",
        instances=instances,
        counts_by_state=counts,
        spend_usd_per_h=round(sum(i.price_usd_per_h for i in instances), 2),
        producing_instances=counts.get(InstanceState.PRODUCING, 0),
        arriving_instances=sum(n for state, n in counts.items() if state in ARRIVING_STATES),
    )


def small_fleet(now: datetime) -> FleetSnapshot:
    return fleet_snapshot(
        now,
        [
            instance_line(now, 1001),
            instance_line(now, 1002, gpu_model="RTX 5090", price=0.43, throughput=131.0),
        ],
    )


def offer_list(now: datetime, count: int, note: str = "") -> OfferList:
    """Ranked offers as the provisioner answers them; `note` makes each line longer (large tool outputs)."""
    lines = [
        OfferLine(
            offer_id=32_871_859 + i,
            gpu_model="RTX 4090" if i % 2 == 0 else "RTX 5090",
            num_gpus=1,
            price_usd_per_h=round(0.41 + i * 0.01, 2),
            reliability=0.98,
            expected_usd_per_task=round((0.41 + i * 0.01) / 120, 5),
            host_id=5000 + i,
            geolocation=f"Region {i}{note}",
        )
        for i in range(count)
    ]
    return OfferList(occurred_at=now, source="provisioner", offers=lines)
