"""`DeciderPorts` for a dry run: the decider's real guardrails decide, nothing is published.

Used by the smoke run against a real Ollama and by the agent's tests: `act` applies the decider step's `judge`
(services/decider/step.py) to a ledger built from the run's inputs, as the decider's own port does, and records
the verdict instead of sending a command. Offers come from the situation (evaluation/agent/situation.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from evaluation.agent import situation
from services.decider.advisor import RunInputs
from services.decider.directives import check_new, effect
from services.decider.guardrails import FleetLedger, GuardrailConfig, ledger_from
from services.decider.step import judge
from shared.contract import (
    Action,
    BenchRequest,
    FleetSnapshot,
    GuardrailVerdict,
    OfferList,
    OfferQuery,
    OperatorReply,
)
from shared.contract.directives import Directive, DirectiveAnswer
from shared.settings import Settings


def guardrail_config(settings: Settings) -> GuardrailConfig:
    return GuardrailConfig(
        budget_usd_per_h=settings.budget_usd_per_h,
        max_instances=settings.max_instances,
        normal_max_price_usd_per_h=settings.normal_max_price_usd_per_h,
        emergency_max_price_usd_per_h=settings.emergency_max_price_usd_per_h,
    )


@dataclass
class DryRunPorts:
    config: GuardrailConfig
    ledger: FleetLedger
    now: datetime
    offers_per_query: int = 8
    offer_note: str = ""
    verdicts: list[GuardrailVerdict] = field(default_factory=list)
    offer_queries: list[OfferQuery] = field(default_factory=list)
    bench_requests: list[BenchRequest] = field(default_factory=list)
    replies: list[OperatorReply] = field(default_factory=list)
    snapshot: FleetSnapshot | None = None
    directives: list[Directive] = field(default_factory=list)  # stored, numbered from 1
    directives_refused: list[Directive] = field(default_factory=list)

    @classmethod
    def for_inputs(
        cls, settings: Settings, inputs: RunInputs, *, offers_per_query: int = 8, offer_note: str = ""
    ) -> DryRunPorts:
        ledger = ledger_from(inputs.snapshot, inputs.signal, [], inputs.now, stale=inputs.stale)
        ports = cls(guardrail_config(settings), ledger, inputs.now, offers_per_query, offer_note)
        ports.snapshot = inputs.snapshot
        return ports

    @property
    def allowed(self) -> list[Action]:
        return [v.action for v in self.verdicts if v.verdict == "allowed"]

    async def act(self, action: Action) -> GuardrailVerdict:
        verdict, self.ledger = judge(action, self.ledger, self.now, self.config)
        self.verdicts.append(verdict)
        return verdict

    async def find_offers(self, query: OfferQuery) -> OfferList:
        self.offer_queries.append(query)
        return situation.offer_list(self.now, self.offers_per_query, self.offer_note)

    async def request_benchmark(self, request: BenchRequest) -> None:
        self.bench_requests.append(request)

    async def reply_to_operator(self, reply: OperatorReply) -> None:
        self.replies.append(reply)

    async def add_directive(self, directive: Directive) -> DirectiveAnswer:
        """The decider desk's checks and effect text (services/decider/directives.py), stored in memory."""
        refusal = check_new(directive, self.config)
        if refusal is not None:
            self.directives_refused.append(directive)
            return DirectiveAnswer(occurred_at=self.now, source="decider", ok=False, message=f"refused: {refusal}")
        stored = directive.model_copy(update={"directive_id": len(self.directives) + 1})
        self.directives.append(stored)
        said = effect(stored, self.snapshot, self.config, self.now)
        message = f"directive #{stored.directive_id} stored: {said}"
        return DirectiveAnswer(occurred_at=self.now, source="decider", ok=True, message=message, directive=stored)
