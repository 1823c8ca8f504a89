"""Plain values for agent tests: demand signals, fleets of any size, run inputs."""

from __future__ import annotations

from datetime import UTC, datetime
from types import EllipsisType
from typing import Any

from evaluation.agent import situation
from services.decider.advisor import RunInputs
from shared.contract import (
    Action,
    DemandSignal,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    OperatorMessage,
    TriggerReason,
    TriggerRef,
)

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def signal(**knobs: Any) -> DemandSignal:
    """The situation's signal at NOW; knobs as in `situation.demand_signal` (state, pending, producing, ...)."""
    return situation.demand_signal(NOW, **knobs)


def instance(instance_id: int, *args: Any, **knobs: Any) -> InstanceLine:
    return situation.instance_line(NOW, instance_id, *args, **knobs)


def snapshot(instances: list[InstanceLine]) -> FleetSnapshot:
    return situation.fleet_snapshot(NOW, instances)


def small_fleet() -> FleetSnapshot:
    return situation.small_fleet(NOW)


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
