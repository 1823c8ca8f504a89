"""The seam between the decider's run and an advisor (the LLM agent) that may act, always through the guardrails.

The decider owns triggering, single flight, the policy and the guardrails; an advisor only sees `RunInputs` and
acts through `DeciderPorts`, whose `act` applies the guardrails before anything reaches the provisioner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from shared.contract import (
    Action,
    AgentTrace,
    BenchRequest,
    DemandSignal,
    FleetSnapshot,
    GuardrailVerdict,
    OfferList,
    OfferQuery,
    OperatorMessage,
    OperatorReply,
    TriggerRef,
)
from shared.contract.directives import Directive


@dataclass(frozen=True)
class RunInputs:
    run_id: str
    now: datetime
    triggers: list[TriggerRef]
    signal: DemandSignal | None
    snapshot: FleetSnapshot | None
    recommendation: str  # the policy's one-line explanation, citing numbers
    recommended_actions: list[Action]  # what the policy would do (before guardrails)
    operator_messages: list[OperatorMessage] = field(default_factory=list)
    stale: bool = False  # signal or snapshot too old: only hold
    directives: tuple[Directive, ...] = ()  # the operators' directives active at `now`


class DeciderPorts(Protocol):
    """What an advisor may do. `act` runs the guardrails; a refused action returns the refusal verdict."""

    async def act(self, action: Action) -> GuardrailVerdict: ...

    async def find_offers(self, query: OfferQuery) -> OfferList: ...

    async def request_benchmark(self, request: BenchRequest) -> None: ...

    async def reply_to_operator(self, reply: OperatorReply) -> None: ...


@dataclass
class AdvisorOutcome:
    trace: AgentTrace
    # degraded: the model was unreachable, slow or incoherent; the decider then applies the policy alone
    status: Literal["ok", "degraded"]
    next_check_s: int | None = None  # schedule_next_check, 30..3600


class Advisor(Protocol):
    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome: ...
