"""The guardrails' rules, their configuration, and the verdict every rule returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from shared import gpu_models
from shared.contract import Action, GuardrailVerdict

# the drain horizon of the removal floor: the policy's backlog drain target (PolicyConfig.backlog_drain_target_s)
BACKLOG_DRAIN_HORIZON_H = 1.0


class GuardrailRule(StrEnum):
    STALE_DATA = "stale_data"
    BUDGET = "budget_usd_per_h"
    MAX_INSTANCES = "max_instances"
    MAX_LAUNCHES_PER_H = "max_launches_per_h"
    PRICE_CAP = "price_cap"
    LAST_PRODUCERS = "last_producers"
    BACKLOG_FLOOR = "backlog_floor"  # producers the backlog needs over the drain horizon are kept
    EMERGENCY_UNJUSTIFIED = "emergency_unjustified"  # downgraded to normal: demand is not stalled or under-provisioned
    WORKERS_STALLED = "workers_stalled"
    REASON_REQUIRED = "reason_required"
    REMOVAL_STATE = "removal_state"
    UNKNOWN_INSTANCE = "unknown_instance"
    ALREADY_REMOVED = "already_removed"
    LOCK_LOST = "lock_lost"  # applied by the runner: a stale lock holder must not act
    BENCH_NOT_FAILED = "bench_not_failed"  # bench_failed named for a machine whose benchmark did not fail
    NOT_PARKED = "not_parked"  # a resume for a machine that is not parked by us
    REMOVAL_IN_FLIGHT = "removal_in_flight"  # a stop or destroy of this machine was sent and not carried out yet
    DIRECTIVE = "directive"  # an operator's directive excludes it (a GPU model, a host, a launch too late to produce)


@dataclass(frozen=True)
class GuardrailConfig:
    budget_usd_per_h: float
    max_instances: int
    normal_max_price_usd_per_h: float
    emergency_max_price_usd_per_h: float
    max_launches_per_h: int = 20
    min_producers_while_queued: int = 1
    backlog_drain_horizon_h: float = BACKLOG_DRAIN_HORIZON_H
    # set only by an operator's directives (services/decider/directives.py `tightened`); the configuration has none
    excluded_gpu_models: frozenset[str] = frozenset()
    excluded_host_ids: frozenset[int] = frozenset()
    no_launch_after: datetime | None = None  # a machine launched from then on could not produce before a drain
    # the directive behind each limit it tightened, so a verdict names it: keyed by the rule's value
    # ("max_instances", "budget_usd_per_h", "directive" for no_launch_after) or `exclusion_key`
    directive_ids: Mapping[str, int] = field(default_factory=dict, hash=False)

    def directive_of(self, key: str) -> int | None:
        return self.directive_ids.get(key)

    def excludes_gpu_model(self, gpu_model: str) -> bool:
        return any(gpu_models.normalised(gpu_model) == gpu_models.normalised(m) for m in self.excluded_gpu_models)


def exclusion_key(*, gpu_model: str | None = None, host_id: int | None = None) -> str:
    """The `directive_ids` key of one excluded GPU model (spelling ignored, as everywhere) or host."""
    if gpu_model is not None:
        return f"gpu_model:{gpu_models.normalised(gpu_model)}"
    return f"host_id:{host_id}"


def verdict(
    action: Action, allowed: bool, rule: GuardrailRule | None, explanation: str, directive_id: int | None = None
) -> GuardrailVerdict:
    return GuardrailVerdict(
        action=action,
        verdict="allowed" if allowed else "refused",
        rule=rule.value if rule else None,
        explanation=explanation[:500],
        directive_id=directive_id,
    )


def by_directive(directive_id: int | None) -> str:
    return f"directive #{directive_id}" if directive_id is not None else "a directive"
