"""Instances: what the provisioner observes on vast.ai, the fleet's lifecycle, and the fleet snapshot."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from shared.contract.base import ContractModel, Event, UtcDatetime
from shared.contract.commands import RemovalReason


class InstanceState(StrEnum):
    """The lifecycle; transitions only go forward, except a parked machine's way back to work (the table lives in
    shared/lifecycle.py)."""

    REQUESTED = "requested"
    LOADING = "loading"
    RUNNING = "running"
    REGISTERED = "registered"
    BENCHMARKED = "benchmarked"
    PRODUCING = "producing"
    DRAINING = "draining"
    PARKED = "parked"  # stopped with its disk kept (our stop to resume later, or an outbid bid): storage billed
    RESUMING = "resuming"  # started again, waiting for its GPU ("Scheduling") or for its worker's next task
    GONE = "gone"
    FAILED = "failed"


class FailureReason(StrEnum):
    STUCK_LOADING = "stuck_loading"
    NEVER_REGISTERED = "never_registered"
    VAST_ERROR = "vast_error"
    BENCH_FAILED = "bench_failed"
    DEAD = "dead"
    LOST = "lost"
    GPU_TAKEN = "gpu_taken"  # a resume waited too long: someone else rented its GPU while it was parked


class ParkReason(StrEnum):
    """Why an instance is parked: it resumes on our command (stopped) or by itself when its bid wins (outbid)."""

    STOPPED = "stopped"  # a StopInstance with reason `park`: kept to be resumed
    OUTBID = "outbid"  # an interruptible instance paused by a higher bid; vast resumes it when its bid wins again


def committed_usd_per_h(
    state: InstanceState, park_reason: ParkReason | None, price_usd_per_h: float, storage_usd_per_h: float | None
) -> float:
    """What an instance holds the budget to: its storage alone while we keep it parked, else its full price.

    An outbid instance keeps its bid committed: vast resumes it without asking, so its price may come back at any
    moment. An unknown storage price counts the full price, never less.
    """
    if state is InstanceState.PARKED and park_reason is ParkReason.STOPPED and storage_usd_per_h is not None:
        return min(storage_usd_per_h, price_usd_per_h)
    return price_usd_per_h


class InstanceObserved(Event):
    """The provisioner's view of one vast.ai instance, with vast's raw status attached.

    Published on `<prefix>.provision.instance.<state>`; `state` is the provisioner's mapping of vast's
    `actual_status` onto the lifecycle (requested, loading, running, draining, parked, resuming, failed, gone).
    """

    instance_id: int
    state: InstanceState
    failure_reason: FailureReason | None = None
    idempotency_key: str | None = Field(default=None, max_length=128)
    label: str | None = Field(default=None, max_length=256)
    gpu_model: str | None = Field(default=None, max_length=64)
    num_gpus: int = Field(default=1, ge=1)
    price_usd_per_h: float = Field(ge=0)
    storage_usd_per_h: float | None = Field(default=None, ge=0, description="the disk's share of the price")
    park_reason: ParkReason | None = Field(default=None, description="set while the state is parked")
    host_id: int | None = None
    machine_id: int | None = None
    offer_id: int | None = None
    vast_actual_status: str | None = Field(default=None, max_length=64)
    vast_intended_status: str | None = Field(default=None, max_length=64)
    vast_status_msg: str | None = Field(default=None, max_length=1000)
    adopted: bool = Field(default=False, description="found by reconciliation rather than launched by this process")
    interruptible: bool = Field(default=False, description="a bid (vast's `is_bid`): paused whenever outbid")
    removal_reason: RemovalReason | None = Field(
        default=None, description="with state gone: the reason of our own destroy that removed it (none: vast lost it)"
    )
    gone_because: str | None = Field(
        default=None,
        max_length=300,
        description="with state gone: what removed it (the command's verb, reason and idempotency key, or vast "
        "no longer listing it)",
    )


class InstanceTransitioned(Event):
    """fleet: an instance entered a lifecycle state. Published on `<prefix>.fleet.instance.<state>`."""

    instance_id: int
    from_state: InstanceState | None
    to_state: InstanceState
    failure_reason: FailureReason | None = None
    park_reason: ParkReason | None = None
    gpu_model: str | None = None
    price_usd_per_h: float = Field(ge=0)
    host_id: int | None = None
    machine_id: int | None = None
    detail: str = Field(default="", max_length=500)


class InstanceLine(ContractModel):
    """One non-gone instance, with its human line: `#33032712 RTX 4090 producing $0.50/h 2.3h up 118 tasks/h`."""

    instance_id: int
    state: InstanceState
    failure_reason: FailureReason | None = None
    park_reason: ParkReason | None = None
    vast_status: str | None = None
    gpu_model: str | None = None
    num_gpus: int = 1
    price_usd_per_h: float = Field(ge=0, description="its full price: what it costs running, or once resumed")
    storage_usd_per_h: float | None = Field(default=None, ge=0)
    host_id: int | None = None
    machine_id: int | None = None
    created_at: UtcDatetime
    state_since: UtcDatetime
    first_producing_at: UtcDatetime | None = Field(
        default=None,
        description="when it first produced: its startup is this minus created_at (less the time it was parked "
        "before that), even once resumed",
    )
    parked_before_producing_s: float = Field(
        default=0.0, ge=0, description="seconds it was parked before it first produced: no part of its startup"
    )
    last_task_at: UtcDatetime | None = None
    tasks_completed: int = Field(default=0, ge=0)
    throughput_tasks_per_h: float | None = Field(default=None, ge=0)
    bench_verdict: str | None = None
    interruptible: bool = False  # a bid: paused whenever outbid
    line: str

    @property
    def committed_usd_per_h(self) -> float:
        return committed_usd_per_h(self.state, self.park_reason, self.price_usd_per_h, self.storage_usd_per_h)


class BidOutcome(ContractModel):
    """How the market treated our bids for one GPU model over fleet's trailing window: what bids are set from.

    `outbid_pauses` ÷ `interruptible_machine_h` is the observed outbid rate (pauses per machine-hour exposed)."""

    gpu_model: str
    interruptible_machine_h: float = Field(ge=0, description="hours our bids were exposed: up, or paused by a bid")
    outbid_pauses: int = Field(ge=0, description="times one of our bids was paused by a higher one")
    window_s: float = Field(gt=0)


class ParkOutcomes(ContractModel):
    """How our parked machines (parked by our stop, not outbid) fared over fleet's trailing window: the hours each
    waited before a resume that produced again, before a resume that found its GPU rented by someone else, or
    before it was given back unresumed. The decider sizes the parked pool from them."""

    window_s: float = Field(gt=0)
    resumed_after_h: list[float] = Field(default_factory=list, max_length=1000)
    taken_after_h: list[float] = Field(default_factory=list, max_length=1000)
    given_back_after_h: list[float] = Field(default_factory=list, max_length=1000)

    @property
    def ended(self) -> int:
        return len(self.resumed_after_h) + len(self.taken_after_h) + len(self.given_back_after_h)


class FleetSnapshotRequest(Event):
    """Ask fleet for its view (request/reply on `<prefix>.fleet.snapshot`)."""


class FleetSnapshot(Event):
    """Every non-gone instance, answered on request and published periodically."""

    instances: list[InstanceLine]
    counts_by_state: dict[InstanceState, int]
    spend_usd_per_h: float = Field(ge=0, description="what the instances commit: a parked one its storage only")
    producing_instances: int = Field(ge=0)
    arriving_instances: int = Field(ge=0, description="requested, loading, running, registered or benchmarked")
    bid_outcomes: list[BidOutcome] = Field(default_factory=list, description="per GPU model with bids in the window")
    park_outcomes: ParkOutcomes | None = Field(default=None, description="none: no park ended in the window")
