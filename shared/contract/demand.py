"""What the job system tells FleetPilot (task events, queue snapshots) and what demand makes of it."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from shared.contract.base import ContractModel, Event, ToleratesUnknownFields, UtcDatetime

MAX_TASK_DURATION_S = 7 * 86400.0

TaskEventKind = Literal["submitted", "started", "completed", "failed"]


class TaskEvent(Event, ToleratesUnknownFields):
    """One task's step, published by the job system on `<prefix>.demand.task.<kind>` (fields it adds are
    ignored and counted: ToleratesUnknownFields)."""

    kind: TaskEventKind
    task_id: str = Field(min_length=1, max_length=256)
    task_type: str = Field(default="default", min_length=1, max_length=64)
    worker_id: str | None = Field(default=None, max_length=256)
    # instances are launched with their vast id in the environment, so a worker can report it
    instance_id: int | None = None
    gpu_model: str | None = Field(default=None, max_length=64)
    # a week bounds any task of a job system whose tasks take minutes; an infinite one would make every worker
    # look busy for ever and leave NaN in demand's windows once it left them
    duration_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_TASK_DURATION_S,
        allow_inf_nan=False,
        description="run time of a completed/failed task",
    )


class QueueDepth(ContractModel, ToleratesUnknownFields):
    task_type: str = Field(min_length=1, max_length=64)
    pending: int = Field(ge=0)
    running: int = Field(ge=0)


class QueueSnapshot(Event, ToleratesUnknownFields):
    """The job system's queue as it stands at `occurred_at`, per task type (fields it adds are ignored and
    counted: ToleratesUnknownFields)."""

    queues: list[QueueDepth]


class DemandState(StrEnum):
    """Explicit, never a boolean: 'no demand' and 'workers dead with tasks queued' must never look alike."""

    IDLE = "idle"  # no arrivals, empty queue
    SERVED = "served"  # the fleet keeps up
    UNDER_PROVISIONED = "under_provisioned"  # sustained arrivals or backlog beyond what the fleet can do
    OVER_PROVISIONED = "over_provisioned"  # capacity well above sustained demand
    WORKERS_STALLED = "workers_stalled"  # tasks queued or arriving, no completions although workers expected


class DemandTrend(StrEnum):
    RISING = "rising"
    STEADY = "steady"
    FALLING = "falling"


class WindowStats(ContractModel):
    """Rates over one trailing window."""

    window_s: int = Field(gt=0)
    arrival_rate_per_h: float = Field(ge=0)
    completion_rate_per_h: float = Field(ge=0)
    failure_rate_per_h: float = Field(ge=0)
    mean_task_duration_s: float | None = Field(default=None, ge=0)
    arrival_trend_per_h2: float = Field(description="slope of the arrival rate over the window, tasks/h per h")


class SeasonEcho(ContractModel):
    """What arrivals did one season ago (a day by default): the shape of the next hours, as seen yesterday.

    A machine takes hours to arrive, so the decider needs the coming hours; in a job system with a daily rhythm
    the best guess for them is what followed this moment a day ago, scaled to today's level.
    """

    season_s: int = Field(gt=0)
    bucket_s: int = Field(gt=0)
    starts_at: UtcDatetime = Field(description="start of the first bucket, about one season before now")
    level_then_per_h: float = Field(ge=0, description="arrival rate over the hour before starts_at")
    rates_then_per_h: list[float] = Field(description="arrival rate per bucket from starts_at on")


class TaskTypeDemand(ContractModel):
    task_type: str
    pending_tasks: int = Field(ge=0)
    running_tasks: int = Field(ge=0)
    windows: list[WindowStats]


class DemandSignal(Event):
    """demand's verdict, published on `<prefix>.demand.signal` on a cadence and on material change."""

    state: DemandState
    explanation: str = Field(max_length=500)
    trend: DemandTrend
    pending_tasks: int = Field(ge=0)
    running_tasks: int = Field(ge=0)
    windows: list[WindowStats]
    by_task_type: list[TaskTypeDemand] = Field(default_factory=list)
    sustained_arrival_rate_per_h: float = Field(ge=0)
    producing_workers: int = Field(
        ge=0,
        description="producers (machines, where the events name one; else workers) that completed a second task,"
        " the latest in the shortest window",
    )
    per_worker_throughput_tasks_per_h: float | None = Field(default=None, ge=0)
    throughput_by_gpu_model_tasks_per_h: dict[str, float] = Field(
        default_factory=dict,
        description="one producer's tasks/h while it has work, by GPU model (a machine's, where the events name one:"
        " the provisioner divides by the GPUs of fleet's producing machines of the model)",
    )
    fleet_capacity_tasks_per_h: float = Field(ge=0)
    backlog_worker_hours: float = Field(ge=0)
    above_capacity_for_s: float = Field(ge=0, description="how long arrivals have exceeded capacity without a break")
    last_completion_at: UtcDatetime | None = None
    signal_seq: int = Field(ge=0, description="increases with every signal a demand instance publishes")
    season: SeasonEcho | None = Field(default=None, description="absent until demand has watched a whole season")

    def window_near(self, window_s: float) -> WindowStats | None:
        """The published window closest to `window_s` long (0: the shortest); None when none is published."""
        return min(self.windows, key=lambda w: abs(w.window_s - window_s)) if self.windows else None
