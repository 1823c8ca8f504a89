"""The decider's answers to `fleetpilot directives`: list them, add one (refused when it would loosen a configured
limit; stored, then its effect said in numbers), revoke one. A change wakes the decider at P1, so it binds within
seconds rather than at the next heartbeat.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pydantic

from services.decider.directive_store import DirectiveStore, DirectiveStoreUnavailable
from services.decider.directives import check_new, effect
from services.decider.guardrails import GuardrailConfig
from services.decider.inputs import InputReader
from services.decider.metrics import DeciderMetrics
from shared.bus import problem_fields, publish_event
from shared.contract import Trigger, TriggerReason
from shared.contract.directives import Directive, DirectiveAnswer, DirectiveList, DirectiveRequest
from shared.service import ServiceContext
from shared.streams import TRIGGERS

log = logging.getLogger("fleetpilot.decider")
SOURCE = "decider"

DirectiveReply = DirectiveList | DirectiveAnswer


@dataclass
class DirectiveDesk:
    ctx: ServiceContext
    store: DirectiveStore
    guardrails: GuardrailConfig
    inputs: InputReader
    metrics: DeciderMetrics

    async def answer(self, request: DirectiveRequest) -> DirectiveReply:
        if request.operation == "list":
            return await self.listing()
        if request.operation == "add":
            if request.directive is None:
                return self._refused("add", "add needs a directive (its kind, value and expiry)")
            return await self.add_directive(request.directive)
        if request.directive_id is None:
            return self._refused("revoke", "revoke needs the directive's number")
        return await self.revoke_directive(request.directive_id, request.operator)

    def malformed(self, error: pydantic.ValidationError) -> DirectiveAnswer:
        """The one line a sender of a request that does not validate gets back (the request is dead-lettered)."""
        self.metrics.directive_requests.labels("unknown", "invalid").inc()
        return self._answer(False, f"malformed directives request: {problem_fields(error) or error}")

    async def listing(self) -> DirectiveList:
        now = self.ctx.clock.now()
        try:
            stored = await self.store.read(now)
        except DirectiveStoreUnavailable as error:
            self.metrics.directive_requests.labels("list", "error").inc()
            return DirectiveList(occurred_at=now, source=SOURCE, error=f"the directives are unknown: {error}")
        self.metrics.directive_requests.labels("list", "ok").inc()
        return DirectiveList(occurred_at=now, source=SOURCE, directives=list(stored.directives), error=stored.problem())

    async def add_directive(self, directive: Directive) -> DirectiveAnswer:
        """The CLI's or the agent's: refused when it would loosen a configured limit, else stored under a new number
        and answered with its effect on the fleet now."""
        now = self.ctx.clock.now()
        refusal = check_new(directive, self.guardrails)
        if refusal is not None:
            return self._refused("add", f"refused: {refusal}")
        try:
            stored = await self.store.add(directive, now)
        except pydantic.ValidationError as error:
            return self._refused("add", f"refused: {problem_fields(error) or error}")
        except DirectiveStoreUnavailable as error:
            return self._failed("add", f"not stored, the directive store is unreachable: {error}")
        if isinstance(stored, str):
            return self._refused("add", f"refused: {stored}")
        snapshot = (await self.inputs.read(now)).snapshot
        said = effect(stored, snapshot, self.guardrails, now)
        woken = await self._wake(f"directive #{stored.directive_id} added by {stored.set_by}")
        self.metrics.directive_requests.labels("add", "ok").inc()
        return self._answer(True, f"directive #{stored.directive_id} stored: {said}{woken}", stored)

    async def revoke_directive(self, directive_id: int, operator: str) -> DirectiveAnswer:
        now = self.ctx.clock.now()
        try:
            revoked = await self.store.revoke(directive_id, operator, now)
        except DirectiveStoreUnavailable as error:
            return self._failed("revoke", f"not revoked, the directive store is unreachable: {error}")
        if revoked.refusal is not None:
            return self._refused("revoke", revoked.refusal, revoked.directive)
        woken = await self._wake(f"directive #{directive_id} revoked by {operator}")
        self.metrics.directive_requests.labels("revoke", "ok").inc()
        return self._answer(True, f"directive #{directive_id} revoked{woken}", revoked.directive)

    async def _wake(self, detail: str) -> str:
        """A P1 trigger every replica sees; "" when sent, else what it means for the operator."""
        now = self.ctx.clock.now()
        trigger = Trigger(
            occurred_at=now, source=SOURCE, priority="p1", reason=TriggerReason.DIRECTIVE_CHANGED, detail=detail
        )
        subject = self.ctx.subjects.trigger("p1", TriggerReason.DIRECTIVE_CHANGED)
        try:
            await publish_event(self.ctx.broker, subject, trigger, stream=TRIGGERS.name(self.ctx.subjects))
        except Exception as error:
            log.error("could not wake the decider after %s: %r", detail, error)
            return " (the decider could not be woken: it takes effect at the next run)"
        return ""

    def _refused(self, operation: str, message: str, directive: Directive | None = None) -> DirectiveAnswer:
        self.metrics.directive_requests.labels(operation, "refused").inc()
        return self._answer(False, message, directive)

    def _failed(self, operation: str, message: str) -> DirectiveAnswer:
        self.metrics.directive_requests.labels(operation, "error").inc()
        log.error("directives %s: %s", operation, message)
        return self._answer(False, message)

    def _answer(self, ok: bool, message: str, directive: Directive | None = None) -> DirectiveAnswer:
        return DirectiveAnswer(
            occurred_at=self.ctx.clock.now(), source=SOURCE, ok=ok, message=message[:2000], directive=directive
        )
