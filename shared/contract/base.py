"""The envelope every FleetPilot message carries, and the strictness every model shares."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
)

SCHEMA_VERSION: Literal[1] = 1


def _as_utc(moment: datetime) -> datetime:
    # most moments are already UTC: returned as they are (a fleet snapshot validates thousands of them)
    if moment.tzinfo is UTC:
        return moment
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        # 9999-12-31T23:59-23:59 is past the last UTC moment Python holds: a validation error, not a crash
        raise ValueError("a moment outside the range of UTC datetimes") from None


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


class ToleratesUnknownFields(BaseModel):
    """For what the job system writes (task events, queue snapshots), not FleetPilot: a field its next version
    adds is ignored, and named by `unknown_fields()` for the consumer to count, instead of dead-lettering every
    event until FleetPilot is upgraded. Our own services' messages stay strict (ContractModel).

    List it after the strict base (`class TaskEvent(Event, ToleratesUnknownFields)`): pydantic merges the
    bases' configurations in that order, so this `extra="allow"` is the one that holds. Allowed, not dropped:
    pydantic then keeps them aside (`model_extra`) with no Python code in the validation, where noting them in a
    validator of ours made reading a task event from JSON 2.4 times slower (5.0 µs against 2.1). Nothing reads
    them but `unknown_fields()`, and whatever keeps a message beyond its handling keeps
    `without_unknown_fields()`: a producer's extra field is as large as it likes."""

    model_config = ConfigDict(extra="allow")

    def __eq__(self, other: object) -> bool:
        """Equal by fields, as before: which unknown fields the producer sent is not part of the message."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def unknown_fields(self) -> list[str]:
        """The ignored fields of this message and of the job-system models inside it (`queues[].owner`)."""
        found = sorted(self.__pydantic_extra__ or ())
        for name in type(self).model_fields:
            value = getattr(self, name)
            for item in value if isinstance(value, list | tuple) else [value]:
                if isinstance(item, ToleratesUnknownFields):
                    suffix = "[]" if isinstance(value, list | tuple) else ""
                    found += [
                        f"{name}{suffix}.{inner}"
                        for inner in item.unknown_fields()
                        if f"{name}{suffix}.{inner}" not in found
                    ]
        return found

    def without_unknown_fields(self) -> Self:
        """This message as kept: its unknown fields, and those of the job-system models inside it, left out."""
        if not self.unknown_fields():
            return self
        known = {name: _known_only(getattr(self, name)) for name in type(self).model_fields}
        # its values were validated as it was read
        return cast(Self, self.model_construct(_fields_set=self.model_fields_set, **known))


def _known_only(value: Any) -> Any:
    if isinstance(value, ToleratesUnknownFields):
        return value.without_unknown_fields()
    if isinstance(value, list):
        return [_known_only(item) for item in value]
    return value
