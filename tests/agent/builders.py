"""Plain values for agent tests: demand signals, fleets of any size, run inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import EllipsisType

from services.decider.advisor import RunInputs
from shared.contract import (
    Action,
    DemandSignal,
    DemandState,
    DemandTrend,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    OperatorMessage,
    TriggerReason,
    TriggerRef,
    WindowStats,
)

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def signal(
    *,
    state: DemandState = DemandState.UNDER_PROVISIONED,
    pending: int = 340,
    running: int = 18,
    arrivals_per_h: float = 410.0,
    capacity_per_h: float = 240.0,
    producing: int = 2,
) -> DemandSignal:
    return DemandSignal(
        occurred_at=NOW,
        source="demand",
        state=state,
        explanation=f"arrivals {arrivals_per_h:.0f}/h exceed capacity {capacity_per_h:.0f}/h",
        trend=DemandTrend.RISING,
        pending_tasks=pending,
        running_tasks=running,
        windows=[
            WindowStats(
                window_s=300,
                arrival_rate_per_h=arrivals_per_h,
                completion_rate_per_h=capacity_per_h,
                failure_rate_per_h=0,
                mean_task_duration_s=240,
                arrival_trend_per_h2=12,
            ),
            WindowStats(
                window_s=3600,
                arrival_rate_per_h=arrivals_per_h * 0.9,
                completion_rate_per_h=capacity_per_h,
                failure_rate_per_h=1,
                mean_task_duration_s=238,
                arrival_trend_per_h2=8,
            ),
        ],
        sustained_arrival_rate_per_h=arrivals_per_h,
        producing_workers=producing,
        per_worker_throughput_tasks_per_h=120.0,
        fleet_capacity_tasks_per_h=capacity_per_h,
        backlog_worker_hours=round(pending / 120.0, 2),
        above_capacity_for_s=5400,
        last_completion_at=NOW - timedelta(minutes=1),
        signal_seq=7,
    )


def instance(
    instance_id: int,
    state: InstanceState = InstanceState.PRODUCING,
    gpu_model: str = "RTX 4090",
    price: float = 0.50,
    throughput: float | None = 118.0,
    label: str = "",
) -> InstanceLine:
    rate = f" {throughput:.0f} tasks/h" if throughput is not None and state == InstanceState.PRODUCING else ""
    return InstanceLine(
        instance_id=instance_id,
        state=state,
        gpu_model=gpu_model,
        price_usd_per_h=price,
        created_at=NOW - timedelta(hours=3),
        state_since=NOW - timedelta(hours=1),
        throughput_tasks_per_h=throughput if state == InstanceState.PRODUCING else None,
        line=f"#{instance_id} {gpu_model} {state.value} ${price:.2f}/h 2.3h up{rate}{label}",
    )


def snapshot(instances: list[InstanceLine]) -> FleetSnapshot:
    counts: dict[InstanceState, int] = {}
    for line in instances:
        counts[line.state] = counts.get(line.state, 0) + 1
    producing = counts.get(InstanceState.PRODUCING, 0)
    arriving = sum(
        n
        for s, n in counts.items()
        if s
        in (
            InstanceState.REQUESTED,
            InstanceState.LOADING,
            InstanceState.RUNNING,
            InstanceState.REGISTERED,
            InstanceState.BENCHMARKED,
        )
    )
    return FleetSnapshot(
        occurred_at=NOW,
        source="fleet",
        instances=instances,
        counts_by_state=counts,
        spend_usd_per_h=round(sum(i.price_usd_per_h for i in instances), 2),
        producing_instances=producing,
        arriving_instances=arriving,
    )


def small_fleet() -> FleetSnapshot:
    return snapshot([instance(1001), instance(1002, gpu_model="RTX 5090", price=0.43, throughput=131.0)])


def large_fleet(count: int) -> FleetSnapshot:
    states = [InstanceState.PRODUCING] * 8 + [InstanceState.LOADING, InstanceState.FAILED]
    models = ["RTX 4090", "RTX 5090", "RTX 3090"]
    return snapshot(
        [
            instance(100_000 + i, states[i % len(states)], models[i % len(models)], 0.3 + (i % 7) * 0.05)
            for i in range(count)
        ]
    )


def launch(count: int = 2, priority: str = "normal") -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW,
        source="decider",
        idempotency_key="policy-key-0001",
        requested_by="policy",
        count=count,
        gpu_models=["RTX 4090"],
        launch_priority=priority,  # type: ignore[arg-type]
        reason=LaunchReason.SUSTAINED_DEMAND,
    )


def operator_message(text: str, conversation_id: str = "conv-1", operator: str = "alice") -> OperatorMessage:
    return OperatorMessage(occurred_at=NOW, source="cli", conversation_id=conversation_id, operator=operator, text=text)


def run_inputs(
    run_id: str = "run-1",
    *,
    actions: list[Action] | None = None,
    operator_messages: list[OperatorMessage] | None = None,
    fleet: FleetSnapshot | EllipsisType | None = ...,
    demand: DemandSignal | EllipsisType | None = ...,
    recommendation: str = "launch 2: sustained arrivals 410/h exceed capacity 240/h for 1.5 h; backlog 2.8 worker-h",
    stale: bool = False,
    now: datetime = NOW,
) -> RunInputs:
    triggers = [TriggerRef(priority="p1", reason=TriggerReason.DEMAND_STATE_CHANGE)]
    if operator_messages:
        triggers.append(TriggerRef(priority="p0", reason=TriggerReason.OPERATOR_MESSAGE))
    return RunInputs(
        run_id=run_id,
        now=now,
        triggers=triggers,
        signal=signal() if isinstance(demand, EllipsisType) else demand,
        snapshot=small_fleet() if isinstance(fleet, EllipsisType) else fleet,
        recommendation=recommendation,
        recommended_actions=[launch()] if actions is None else actions,
        operator_messages=operator_messages or [],
        stale=stale,
    )
