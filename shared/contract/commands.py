"""Commands to the provisioner (imperative) and its typed answer, tied to the idempotency key."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from shared.contract.base import Event

LaunchPriority = Literal["normal", "emergency"]
RequestedBy = Literal["policy", "agent", "operator"]


class LaunchReason(StrEnum):
    SUSTAINED_DEMAND = "sustained_demand"
    FORECAST = "forecast"  # the daily rhythm (demand's echo of a day ago) says the demand is coming
    BACKLOG = "backlog"
    REPLACEMENT = "replacement"
    MINIMUM_FLEET = "minimum_fleet"
    OPERATOR_REQUEST = "operator_request"


class RemovalReason(StrEnum):
    """Destructive actions must say why, as an enum (small models fill required enums reliably)."""

    IDLE = "idle"
    OVER_PROVISIONED = "over_provisioned"
    STUCK_LOADING = "stuck_loading"
    NEVER_REGISTERED = "never_registered"
    FAILED = "failed"
    DEAD = "dead"
    BENCH_FAILED = "bench_failed"
    BUDGET = "budget"
    OPERATOR_REQUEST = "operator_request"
    # a stop that keeps the disk to resume the machine later: demand is expected back within the horizon where
    # storage costs less than a new machine's startup; every other reason means "not needed again"
    PARK = "park"
    # an interruptible instance paused by a higher bid for too long: the demand it was for is served otherwise
    OUTBID = "outbid"


class ProvisionCommand(Event):
    """Every command carries an idempotency key: the provisioner acts on a key at most once."""

    idempotency_key: str = Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    requested_by: RequestedBy
    fencing_token: int | None = Field(
        default=None,
        ge=1,
        description="the decider's lock token: a command older than the newest seen is refused (none: not fenced)",
    )
    # A launch queued through a provisioner outage ran hours later on the demand of then (security review, issue
    # #24): the decider stamps each command with how long its inputs stay true, and the provisioner refuses it after.
    expires_at: datetime | None = Field(
        default=None,
        description="UTC; the provisioner refuses the command from then on (none: a hand-made command, no expiry)",
    )

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class LaunchInstances(ProvisionCommand):
    # what the command is, said in the message: a stop, a destroy and a drain have the same fields, and a decision
    # record read back (the audit, `fleetpilot history`) must not take one for another
    verb: Literal["launch"] = "launch"
    count: int = Field(ge=1, le=100)
    gpu_models: list[str] = Field(default_factory=list, description="preferred models; empty means any allowed")
    launch_priority: LaunchPriority
    reason: LaunchReason
    max_price_usd_per_h: float | None = Field(default=None, gt=0)
    # interruptible (bid) instances cost vast's min_bid and up, often half the on-demand price, and are paused
    # while another renter bids more; each is created with an explicit price (vast rents a create without one
    # on-demand, whatever the search asked for)
    interruptible: int = Field(default=0, ge=0, le=100, description="how many of `count` are interruptible")
    bid_markup: float = Field(default=0.1, ge=0, le=1, description="each bid: the offer's min_bid × (1 + this)")
    # an operator's directives (shared/contract/directives.py): offers of these models or on these hosts are dropped
    exclude_gpu_models: list[str] = Field(default_factory=list, description="never rent these GPU models")
    exclude_host_ids: list[int] = Field(default_factory=list, description="never rent on these vast hosts")

    @model_validator(mode="after")
    def _interruptible_within_count(self) -> LaunchInstances:
        if self.interruptible > self.count:
            raise ValueError(f"interruptible: at most count ({self.count}), got {self.interruptible}")
        return self


def bid_usd_per_h(min_bid_usd_per_h: float, on_demand_usd_per_h: float, bid_markup: float) -> float:
    """An interruptible slot's bid: the machine's min_bid × (1 + markup), never above its on-demand price."""
    return min(on_demand_usd_per_h, min_bid_usd_per_h * (1 + max(0.0, bid_markup)))


class StopInstance(ProvisionCommand):
    verb: Literal["stop"] = "stop"
    instance_id: int
    reason: RemovalReason


class ResumeInstance(ProvisionCommand):
    """Start a parked instance again: its image and data are on disk, so it produces in minutes unless its GPU was
    rented meanwhile. Budgeted like a launch at the instance's full price."""

    verb: Literal["resume"] = "resume"
    instance_id: int
    reason: LaunchReason


class DestroyInstance(ProvisionCommand):
    verb: Literal["destroy"] = "destroy"
    instance_id: int
    reason: RemovalReason


class DrainInstance(ProvisionCommand):
    """To fleet, not the provisioner: stop counting the instance as capacity and let it finish its tasks."""

    verb: Literal["drain"] = "drain"
    instance_id: int
    reason: RemovalReason


class RefusalRule(StrEnum):
    BUDGET_USD_PER_H = "budget_usd_per_h"
    DAILY_BUDGET_USD = "daily_budget_usd"  # today's spend, to midnight UTC, with one-off charges
    MAX_INSTANCES = "max_instances"
    NO_OFFER = "no_offer"
    UNKNOWN_FLEET = "unknown_fleet"  # the instance list could not be read: never assume zero
    AUTH = "auth"
    UNKNOWN_INSTANCE = "unknown_instance"
    VAST_ERROR = "vast_error"
    STALE_FENCING_TOKEN = "stale_fencing_token"  # sent by a decider that had lost the lock by then
    SHADOW_MODE = "shadow_mode"  # FLEETPILOT_DECIDER_MODE=shadow: nothing is sent to vast.ai
    NOT_PARKED = "not_parked"  # a resume for an instance we did not park (running, outbid, failed)
    EXPIRED = "expired"  # taken after its expires_at: decided on demand that is no longer current


class ProvisionResult(Event):
    """The provisioner's answer to one command, on `<prefix>.provision.result`."""

    idempotency_key: str
    command: Literal["launch", "stop", "destroy", "resume"]
    outcome: Literal["done", "refused", "failed"]
    refusal_rule: RefusalRule | None = None
    detail: str = Field(default="", max_length=1000)
    instance_ids: list[int] = Field(default_factory=list)
