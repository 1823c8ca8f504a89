"""The decision record: every decider run, with its inputs, reasoning, actions and guardrail verdicts."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from shared.contract.base import ContractModel, Event, UtcDatetime
from shared.contract.commands import (
    DestroyInstance,
    DrainInstance,
    LaunchInstances,
    LaunchReason,
    ResumeInstance,
    StopInstance,
)
from shared.contract.demand import DemandSignal
from shared.contract.triggers import TriggerReason

RunOutcome = Literal["hold", "acted", "stale", "refused", "degraded", "skipped"]
DataFreshness = Literal["fresh", "stale", "missing"]
# shadow: the decider decides, audits and explains but publishes no command, and the provisioner refuses any
DeciderMode = Literal["shadow", "live"]


class TriggerRef(ContractModel):
    priority: Literal["p0", "p1", "heartbeat", "scheduled"]
    reason: TriggerReason | None = None
    event_id: str | None = None


def _verb_of(value: Any) -> str:
    """The command's `verb`; a record written before commands said it is read by its fields (a removal as a stop,
    all that could be told of it then)."""
    if isinstance(value, dict):
        if "verb" in value:
            return str(value["verb"])
        if "count" in value:
            return "launch"
        return "resume" if value.get("reason") in LAUNCH_REASONS else "stop"
    return str(getattr(value, "verb", "stop"))


LAUNCH_REASONS = frozenset(reason.value for reason in LaunchReason)

Action = Annotated[
    Annotated[LaunchInstances, Tag("launch")]
    | Annotated[StopInstance, Tag("stop")]
    | Annotated[DestroyInstance, Tag("destroy")]
    | Annotated[DrainInstance, Tag("drain")]
    | Annotated[ResumeInstance, Tag("resume")],
    Discriminator(_verb_of),
]
"""Anything the decider (policy or agent) may do to the fleet; every one passes the guardrails."""


class GuardrailVerdict(ContractModel):
    action: Action
    verdict: Literal["allowed", "refused"]
    rule: str | None = Field(default=None, description="the guardrail that refused, when refused")
    explanation: str = Field(max_length=500)
    directive_id: int | None = Field(
        default=None, description="the operator directive whose limit decided this verdict (none: the configuration)"
    )


class AgentTrace(ContractModel):
    observation: str = Field(default="", max_length=20000)
    assessment: str = Field(default="", max_length=8000)
    decision: str = Field(default="", max_length=8000)
    rounds: int = Field(default=0, ge=0)
    tool_calls: list[str] = Field(default_factory=list)
    prompt_tokens: int = Field(default=0, ge=0)
    status: Literal["ok", "degraded", "skipped"] = "ok"


class DecisionRecord(Event):
    run_id: str
    fencing_token: int | None = None
    triggers: list[TriggerRef]
    started_at: UtcDatetime
    finished_at: UtcDatetime
    duration_s: float = Field(ge=0)
    signal_freshness: DataFreshness
    snapshot_freshness: DataFreshness
    signal: DemandSignal | None = None
    snapshot_digest: str = Field(default="", max_length=4000)
    recommendation: str = Field(max_length=4000, description="the policy's explanation, citing numbers")
    verdicts: list[GuardrailVerdict] = Field(default_factory=list)
    commands_sent: list[str] = Field(default_factory=list, description="idempotency keys of commands published")
    mode: DeciderMode = Field(default="live", description="shadow: allowed commands were withheld, not published")
    commands_withheld: list[str] = Field(
        default_factory=list, description="shadow mode: idempotency keys of allowed commands that were not published"
    )
    outcome: RunOutcome
    agent: AgentTrace | None = None
    directives: list[int] = Field(
        default_factory=list, description="numbers of the operator's directives in force that the run enforced"
    )
