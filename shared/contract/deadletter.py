"""What a rejected message becomes: nothing is dropped silently."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.contract.base import Event

# implausible_input: valid by its schema, beyond what the sender can mean (a queue of 10^20 tasks)
DeadLetterReason = Literal["invalid_message", "handler_failed", "implausible_input"]


class DeadLetter(Event):
    """Published on `<prefix>.dlq.<service>` with everything needed to replay the original."""

    service: str
    reason: DeadLetterReason
    error: str = Field(max_length=4000)
    original_subject: str
    payload: str = Field(description="the original bytes, decoded as UTF-8 with replacement")
    payload_base64: str = Field(description="the original bytes exactly")
    headers: dict[str, str] = Field(default_factory=dict)
    delivery_count: int = Field(default=1, ge=1)
