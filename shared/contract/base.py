"""The envelope every FleetPilot message carries, and the strictness every model shares."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1


def _as_utc(moment: datetime) -> datetime:
    # most moments are already UTC: returned as they are (a fleet snapshot validates thousands of them)
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_as_utc)]
"""A timezone-aware moment, normalised to UTC; a naive datetime is rejected (it has no meaning across hosts)."""


class ContractModel(BaseModel):
    """Strict base: unknown fields are an error, so a producer/consumer shape mismatch fails loudly."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def new_event_id() -> str:
    return uuid.uuid4().hex


class Event(ContractModel):
    """Every message on the bus: idempotent handling keys on `event_id`."""

    event_id: str = Field(default_factory=new_event_id, min_length=1, max_length=128)
    occurred_at: UtcDatetime
    source: str = Field(min_length=1, max_length=64, description="the service or system that wrote it")
    schema_version: Literal[1] = SCHEMA_VERSION
