"""Offer look-ups answered by the provisioner (the only service that talks to vast.ai), request/reply."""

from __future__ import annotations

from pydantic import Field

from shared.contract.base import ContractModel, Event


class OfferQuery(Event):
    """Asked on `<prefix>.provision.offers` (core NATS request/reply)."""

    gpu_models: list[str] = Field(default_factory=list, description="empty means every allowed model")
    max_price_usd_per_h: float | None = Field(default=None, gt=0)
    limit: int = Field(default=10, ge=1, le=50)


class OfferLine(ContractModel):
    offer_id: int
    gpu_model: str
    num_gpus: int = Field(ge=1)
    price_usd_per_h: float = Field(ge=0)
    reliability: float = Field(ge=0, le=1)
    expected_usd_per_task: float = Field(ge=0, description="the ranking key: price ÷ expected throughput, adjusted")
    host_id: int | None = None
    machine_id: int | None = None
    geolocation: str | None = None


class OfferList(Event):
    """Ranked best first. `error` set means the search failed: an empty list then means unknown, not none."""

    offers: list[OfferLine] = Field(default_factory=list)
    error: str | None = Field(default=None, max_length=1000)
