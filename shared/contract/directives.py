"""Operator directives: a standing instruction that shapes every decision until it expires or is revoked.

An operator (through `fleetpilot directives add`, or in plain words to the agent, which turns the words into one
of these) narrows what the fleet may do: no more of a GPU model, stay away from a host, at most N machines, at
most $X/h, everything given back by a moment, a lever on or off. The decider stores them and enforces every
active one in code, in the policy's step and in the guardrails; a directive can only tighten the configured
limits, never loosen them (services/decider/directives.py). Every kind is a required enum, so a small model that
skips optional fields still names what it means.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from shared.contract.base import ContractModel, Event, UtcDatetime

# a directive lasts at most this long: an instruction given once must not bind the fleet forever
DIRECTIVE_MAX_LIFETIME_S = 31 * 24 * 3600.0
MAX_ACTIVE_DIRECTIVES = 64  # one operator's standing instructions, not a rule engine


class DirectiveKind(StrEnum):
    EXCLUDE_GPU_MODEL = "exclude_gpu_model"  # rent no new machine of this GPU model, resume none
    EXCLUDE_HOST = "exclude_host"  # rent nothing on this vast host, resume nothing there
    CAP_INSTANCES = "cap_instances"  # at most this many machines; those above drain after their tasks
    CAP_BUDGET = "cap_budget"  # at most this many $/h committed; the dearest above it drain
    DRAIN_BY = "drain_by"  # every machine given back by `drain_by`; no launch that could not produce before it
    LEVER = "lever"  # switch one of the policy's levers on or off


class Lever(StrEnum):
    PARK = "park"  # stop surplus machines (producers, loaded ones on the way) with their disk kept, resume them first
    BIDS = "bids"  # interruptible bids for part of the growth


class DirectiveBase(ContractModel):
    directive_id: int = Field(ge=1, description="numbered by the decider as it stores it")
    set_at: UtcDatetime
    set_by: str = Field(min_length=1, max_length=64, description="the operator, as the CLI or the agent named them")
    via: Literal["cli", "agent"]
    instruction: str = Field(default="", max_length=500, description="the operator's words, when said in words")
    expires_at: UtcDatetime
    revoked_at: UtcDatetime | None = None
    revoked_by: str | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _expires_after_it_is_set(self) -> DirectiveBase:
        lifetime = (self.expires_at - self.set_at).total_seconds()
        if lifetime <= 0:
            raise ValueError("expires_at must be after set_at")
        if lifetime > DIRECTIVE_MAX_LIFETIME_S:
            raise ValueError(f"a directive lasts at most {DIRECTIVE_MAX_LIFETIME_S / 86400:.0f} days")
        return self

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and self.set_at <= now < self.expires_at


class ExcludeGpuModel(DirectiveBase):
    kind: Literal[DirectiveKind.EXCLUDE_GPU_MODEL] = DirectiveKind.EXCLUDE_GPU_MODEL
    gpu_model: str = Field(min_length=1, max_length=64)


class ExcludeHost(DirectiveBase):
    kind: Literal[DirectiveKind.EXCLUDE_HOST] = DirectiveKind.EXCLUDE_HOST
    host_id: int = Field(ge=0)


class CapInstances(DirectiveBase):
    kind: Literal[DirectiveKind.CAP_INSTANCES] = DirectiveKind.CAP_INSTANCES
    max_instances: int = Field(ge=0, le=10_000)


class CapBudget(DirectiveBase):
    kind: Literal[DirectiveKind.CAP_BUDGET] = DirectiveKind.CAP_BUDGET
    max_usd_per_h: float = Field(ge=0, le=1_000_000)


class DrainBy(DirectiveBase):
    kind: Literal[DirectiveKind.DRAIN_BY] = DirectiveKind.DRAIN_BY
    drain_by: UtcDatetime

    @model_validator(mode="after")
    def _drain_within_life(self) -> DrainBy:
        if not self.set_at <= self.drain_by <= self.expires_at:
            raise ValueError("drain_by must lie between set_at and expires_at")
        return self


class SetLever(DirectiveBase):
    kind: Literal[DirectiveKind.LEVER] = DirectiveKind.LEVER
    lever: Lever
    state: Literal["on", "off"]


Directive = Annotated[
    ExcludeGpuModel | ExcludeHost | CapInstances | CapBudget | DrainBy | SetLever,
    Field(discriminator="kind"),
]


class DirectiveList(Event):
    """The decider's answer to a directives request: every directive still stored (active, expired within the
    retention, revoked), newest first; `error` when the store could not be read (unknown, never "none")."""

    directives: list[Directive] = Field(default_factory=list)
    error: str | None = None


class DirectiveRequest(Event):
    """`fleetpilot directives` → decider: list them, add one (the CLI's typed form), or revoke one by number."""

    operation: Literal["list", "add", "revoke"]
    operator: str = Field(min_length=1, max_length=64)
    directive: Directive | None = Field(default=None, description="for add: directive_id and set_at are re-stamped")
    directive_id: int | None = Field(default=None, ge=1, description="for revoke")


class DirectiveAnswer(Event):
    """What an add or revoke did, in one line the operator reads (the effect in numbers), and the list after."""

    ok: bool
    message: str = Field(max_length=2000)
    directive: Directive | None = None
