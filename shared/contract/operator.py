"""The operator ⇄ agent conversation. Operator text is data, never an instruction that lifts a guardrail."""

from __future__ import annotations

from pydantic import Field

from shared.contract.base import Event


class OperatorMessage(Event):
    conversation_id: str = Field(min_length=1, max_length=128)
    operator: str = Field(min_length=1, max_length=64)
    text: str = Field(min_length=1, max_length=4000)


class OperatorReply(Event):
    conversation_id: str = Field(min_length=1, max_length=128)
    in_reply_to: str = Field(description="event_id of the operator message")
    text: str = Field(max_length=8000)
