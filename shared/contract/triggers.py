"""Why the decider should wake: P0 at once, P1 debounced."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from shared.contract.base import Event


class TriggerReason(StrEnum):
    # P0: wake now
    OPERATOR_MESSAGE = "operator_message"
    CONFIG_CHANGE = "config_change"
    INSTANCE_RUNNING = "instance_running"
    INSTANCE_FAILED = "instance_failed"
    INSTANCE_DEAD = "instance_dead"
    WORKERS_STALLED = "workers_stalled"
    ALL_PRODUCERS_SILENT = "all_producers_silent"
    # P1: wake soon, debounced
    INSTANCE_TRANSITION = "instance_transition"
    DEMAND_TREND_CHANGE = "demand_trend_change"
    DEMAND_STATE_CHANGE = "demand_state_change"
    BENCH_RESULT = "bench_result"
    PROVISION_RESULT = "provision_result"
    DIRECTIVE_CHANGED = "directive_changed"  # an operator added or revoked a directive: its effect within a P1 delay


TriggerPriority = Literal["p0", "p1"]


class Trigger(Event):
    """Published on `<prefix>.trigger.<priority>.<reason>`."""

    priority: TriggerPriority
    reason: TriggerReason
    detail: str = Field(default="", max_length=500)
    instance_id: int | None = None
