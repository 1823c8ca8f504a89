"""What fleet's core returns: transitions (each with the trigger fleet publishes for it), alerts, and why it
refused task events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from shared.contract import FailureReason, InstanceState, ParkReason, TriggerPriority, TriggerReason


@dataclass(frozen=True)
class Transition:
    instance_id: int
    from_state: InstanceState | None
    to_state: InstanceState
    at: datetime
    failure_reason: FailureReason | None
    detail: str
    gpu_model: str | None
    price_usd_per_h: float
    host_id: int | None
    machine_id: int | None
    # how urgently it wakes the decider (lifecycle.trigger_for): fleet publishes it, the world simulator reads it
    trigger_priority: TriggerPriority
    trigger_reason: TriggerReason
    park_reason: ParkReason | None = None
    visit: int = 1  # how many times the instance has entered this state (parked machines come back)


@dataclass(frozen=True)
class Alert:
    reason: TriggerReason
    detail: str
    at: datetime


@dataclass(frozen=True)
class Tick:
    transitions: list[Transition]
    alerts: list[Alert]


class TaskEventRefusal(StrEnum):
    """Why a task event was not applied (counted by reason: fleetpilot_fleet_refused_task_events_total)."""

    # the task's completion was counted already: a replay under a fresh event id
    REPEATED_COMPLETION = "repeated_completion"
