"""Offer look-ups and the account's charges, answered by the provisioner (the only service that talks to vast.ai),
request/reply."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import Field

from shared.contract.base import ContractModel, Event


class OfferQuery(Event):
    """Asked on `<prefix>.provision.offers` (core NATS request/reply)."""

    gpu_models: list[str] = Field(default_factory=list, description="empty means every allowed model")
    max_price_usd_per_h: float | None = Field(default=None, gt=0)
    limit: int = Field(default=10, ge=1, le=50)


class OfferLine(ContractModel):
    """Every number finite: JSON has no inf, so an offer ranked at inf $/task went out as null and the whole list
    failed validation at the decider. A line with one is refused where it is made."""

    offer_id: int
    gpu_model: str
    num_gpus: int = Field(ge=1)
    price_usd_per_h: float = Field(ge=0, allow_inf_nan=False)
    reliability: float = Field(ge=0, le=1)
    expected_usd_per_task: float = Field(
        ge=0, allow_inf_nan=False, description="the ranking key: price ÷ expected throughput, adjusted"
    )
    host_id: int | None = None
    machine_id: int | None = None
    geolocation: str | None = None


class OfferList(Event):
    """Ranked best first. `error` set means the search failed: an empty list then means unknown, not none."""

    offers: list[OfferLine] = Field(default_factory=list)
    error: str | None = Field(default=None, max_length=1000)


ChargeKind = Literal["gpu", "storage", "bandwidth", "other"]


class ChargesQuery(Event):
    """Asked on `<prefix>.provision.charges` (core NATS request/reply): what vast.ai charged since `since`."""

    since: date = Field(description="the first UTC day whose charges are wanted")


class ChargeLine(ContractModel):
    """One of vast.ai's charge rows: one instance, one kind, one UTC day."""

    instance_id: int | None = None
    gpu_model: str | None = Field(default=None, description="as the provisioner knows the instance; none: not ours")
    kind: ChargeKind
    day: date
    quantity: float = Field(ge=0, allow_inf_nan=False, description="hours (gpu, storage) or GB (bandwidth)")
    amount_usd: float = Field(ge=0, allow_inf_nan=False)
    description: str = Field(default="", max_length=300)


class ChargeList(Event):
    """`error` set means vast.ai could not be read, in whole or in part (rows whose amounts are unknown): the lines
    then are not the whole cost, and an empty list means unknown, never $0."""

    lines: list[ChargeLine] = Field(default_factory=list)
    error: str | None = Field(default=None, max_length=1000)
    # rows vast.ai sent that could not be read: with `error` set, the lines are what was read, the cost at least them
    unreadable_rows: int = Field(default=0, ge=0)
