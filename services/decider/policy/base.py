"""What every decider policy returns, and the one interface they share (like cluster-autoscaler's expanders)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from services.decider.policy.config import PolicyConfig
from shared.contract import DemandSignal, FleetSnapshot, LaunchPriority, LaunchReason, RemovalReason

RemovalVerb = Literal["drain", "stop", "destroy"]


@dataclass(frozen=True)
class LaunchPlan:
    count: int
    launch_priority: LaunchPriority
    reason: LaunchReason
    gpu_models: tuple[str, ...] = ()  # preferred first; empty means any allowed model
    interruptible: int = 0  # of `count`, bid instances (cheaper, paused while outbid)
    bid_markup: float = 0.1  # each bid: the offer's min_bid × (1 + this)


@dataclass(frozen=True)
class RemovalPlan:
    verb: RemovalVerb
    instance_id: int
    reason: RemovalReason


@dataclass(frozen=True)
class ResumePlan:
    """Start a parked machine again instead of launching a new one: minutes instead of hours to producing."""

    instance_id: int
    reason: LaunchReason


@dataclass(frozen=True)
class PolicyFigures:
    """The numbers behind a recommendation, for the audit record, the agent and the world simulator."""

    throughput_per_machine_tasks_per_h: float = 0.0
    startup_s: float = 0.0
    arrival_forecast_per_h: float = 0.0
    keep_arrival_rate_per_h: float = 0.0
    pending_tasks: int = 0
    backlog_at_horizon_tasks: float = 0.0
    target_machines: int = 0
    keep_machines: int = 0
    producing: int = 0
    stalled_producers: int = 0
    arriving: int = 0
    unobserved_launches: int = 0
    sustained: bool = False
    undrainable_backlog: bool = False
    season_level_ratio: float | None = None  # set when demand's echo of a day ago shaped the forecast


@dataclass(frozen=True)
class Recommendation:
    launches: tuple[LaunchPlan, ...] = ()
    removals: tuple[RemovalPlan, ...] = ()
    explanation: str = ""
    figures: PolicyFigures = field(default_factory=PolicyFigures)
    resumes: tuple[ResumePlan, ...] = ()

    @property
    def is_hold(self) -> bool:
        return not self.launches and not self.removals and not self.resumes

    @property
    def launch_count(self) -> int:
        return sum(plan.count for plan in self.launches)

    @property
    def replacements(self) -> tuple[LaunchPlan, ...]:
        return tuple(plan for plan in self.launches if plan.reason is LaunchReason.REPLACEMENT)

    def removals_of(self, verb: RemovalVerb) -> tuple[RemovalPlan, ...]:
        return tuple(plan for plan in self.removals if plan.verb == verb)


class Policy(Protocol):
    """A strategy: plain inputs in, a Recommendation out; no I/O, no clock (time is `now`)."""

    name: str

    def recommend(
        self, signal: DemandSignal, snapshot: FleetSnapshot, now: datetime, *, unobserved_launches: int = 0
    ) -> Recommendation: ...


@runtime_checkable
class TunablePolicy(Policy, Protocol):
    """A policy with levers an operator's directive may set: it runs with another config without changing."""

    config: PolicyConfig

    def with_config(self, config: PolicyConfig) -> Policy: ...
