"""The port one run acts through (`DeciderPorts`): every action passes the step's guardrails, then the lock's
fence, then goes out on the bus, or in shadow mode is recorded as withheld; the run's verdicts and sends are kept
here for its audit."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from services.decider import SERVICE
from services.decider.guardrails import (
    FleetLedger,
    GuardrailConfig,
    GuardrailRule,
    SentLaunch,
    SentRemoval,
    worst_price_usd_per_h,
)
from services.decider.lock import Lease, LockUnavailable
from services.decider.shadow import offer_query, would_rent
from services.decider.step import OPERATOR_QUESTION, RunPlan, judge
from shared.bus import publish_event
from shared.contract import (
    Action,
    BenchRequest,
    DestroyInstance,
    DrainInstance,
    GuardrailVerdict,
    LaunchInstances,
    OfferList,
    OfferQuery,
    OperatorReply,
    ResumeInstance,
    StopInstance,
)
from shared.contract.directives import Directive, DirectiveAnswer
from shared.service import ServiceContext
from shared.streams import BENCH, COMMANDS, OPERATOR

if TYPE_CHECKING:
    from services.decider.runner import Decider

OFFER_REQUEST_TIMEOUT_S = 10.0
PUBLISH_FAILED = "publish_failed"  # not a guardrail: the bus refused the command
COMMAND_PUBLISH_FAILED = "command_publish_failed"  # the alert kind of a PUBLISH_FAILED (deploy/prometheus/alerts.yml)


def command_subject(ctx: ServiceContext, action: Action) -> str:
    if isinstance(action, DrainInstance):
        return ctx.subjects.fleet_drain
    if isinstance(action, LaunchInstances):
        return ctx.subjects.provision_command("launch")
    if isinstance(action, ResumeInstance):
        return ctx.subjects.provision_command("resume")
    return ctx.subjects.provision_command("stop" if isinstance(action, StopInstance) else "destroy")


@dataclass
class RunPorts:
    """`DeciderPorts` for one run: every action passes the guardrails, then the fence, then goes out."""

    decider: Decider
    lease: Lease
    ledger: FleetLedger
    answer_only: bool = False  # an operator message is among the run's triggers: every action is refused
    # the limits this run's actions are judged by: the configured ones tightened by the operator's directives in
    # force (RunPlan.guardrails); None: the configured ones
    guardrails: GuardrailConfig | None = None
    verdicts: list[GuardrailVerdict] = field(default_factory=list)
    commands_sent: list[str] = field(default_factory=list)
    commands_withheld: list[str] = field(default_factory=list)  # shadow mode: allowed, not published
    launched: int = 0
    answered: set[str] = field(default_factory=set)  # operator messages (event ids) replied to in this run

    async def add_directive(self, directive: Directive) -> DirectiveAnswer:
        """An operator's instruction as the agent wrote it (a directive tool), stored through the decider's desk with
        the checks `fleetpilot directives add` meets: a directive may only tighten a configured limit. Allowed in
        an answer-only run, which is where an operator's instruction arrives; what it changes acts from the run
        the desk wakes, under the guardrails it tightened."""
        return await self.decider.directive_desk.add_directive(directive)

    async def act(self, action: Action) -> GuardrailVerdict:
        """An agent's action: judged by the step's guardrails, then carried out if allowed."""
        d = self.decider
        now = d.ctx.clock.now()
        limits = self.guardrails or d.guardrails
        verdict, ledger = judge(action, self.ledger, now, limits, answer_only=self.answer_only)
        return await self._carry_out(verdict, ledger, now)

    async def carry_out(self, plan: RunPlan, now: datetime) -> None:
        """A plan's verdicts, in order: the allowed ones sent (a send refused by the fence or the bus is recorded
        as refused; its room in the ledger stays taken, as a command that may have reached the bus should)."""
        for verdict in plan.verdicts:
            await self._carry_out(verdict, plan.ledger, now)
        self.ledger = plan.ledger

    async def _carry_out(self, verdict: GuardrailVerdict, ledger: FleetLedger, now: datetime) -> GuardrailVerdict:
        d = self.decider
        if verdict.verdict == "allowed":
            verdict, self.ledger = await self._send(verdict, ledger, now)
        if verdict.rule and verdict.rule not in (PUBLISH_FAILED, OPERATOR_QUESTION):
            d.metrics.guardrail_refusals.labels(verdict.rule).inc()
        self.verdicts.append(verdict)
        return verdict

    async def _send(
        self, verdict: GuardrailVerdict, ledger: FleetLedger, now: datetime
    ) -> tuple[GuardrailVerdict, FleetLedger]:
        """The fence, then the bus (or shadow mode's record); the ledger as it stands after."""
        d, action = self.decider, verdict.action
        try:
            holds = await d.single_flight.holds(self.lease)
        except LockUnavailable:
            holds = False
        if not holds:
            d.alert("lock_lost", f"lock lost before sending {action.idempotency_key}: not acting")
            d.metrics.lock_attempts.labels("lost").inc()
            refused = verdict.model_copy(
                update={
                    "verdict": "refused",
                    "rule": GuardrailRule.LOCK_LOST.value,
                    "explanation": "another replica holds the lock now (fencing token superseded)",
                }
            )
            return refused, self.ledger
        if d.ctx.settings.decider_mode == "shadow":
            self.commands_withheld.append(action.idempotency_key)
            withheld = f"shadow mode, not sent: {verdict.explanation}"
            if isinstance(action, LaunchInstances):
                withheld = f"shadow mode, not sent; {would_rent(action, await self.find_offers(offer_query(action)))}"
                withheld += f"; {verdict.explanation}"
            withheld = withheld[:500]
            return verdict.model_copy(update={"explanation": withheld}), ledger
        # the lock's token goes with the command: the provisioner refuses one older than the newest it has seen;
        # and one taken after it expires (decided on demand that has since changed)
        expires_at = now + timedelta(seconds=d.config.command_ttl_s)
        fenced = action.model_copy(update={"fencing_token": self.lease.token, "expires_at": expires_at})
        try:
            await publish_event(
                d.ctx.broker, command_subject(d.ctx, action), fenced, stream=COMMANDS.name(d.ctx.subjects)
            )
        except Exception as error:
            # FP_COMMANDS refuses new commands when full (discard new, shared/streams.py): an alert, not a log line
            d.alert(COMMAND_PUBLISH_FAILED, f"could not publish {action.idempotency_key}: {error!r}")
            failed = verdict.model_copy(
                update={"verdict": "refused", "rule": PUBLISH_FAILED, "explanation": f"bus error: {error!r}"[:500]}
            )
            return failed, self.ledger
        self.commands_sent.append(action.idempotency_key)
        d.metrics.commands.labels(command_subject(d.ctx, action).rsplit(".", 1)[-1]).inc()
        if isinstance(action, LaunchInstances):
            self.launched += action.count
            price = worst_price_usd_per_h(action, d.guardrails)
            with contextlib.suppress(LockUnavailable):
                await d.single_flight.record_launch(
                    self.lease, SentLaunch(action.idempotency_key, now, action.count, price)
                )
        if isinstance(action, StopInstance | DestroyInstance):
            verb = "stop" if isinstance(action, StopInstance) else "destroy"
            with contextlib.suppress(LockUnavailable):
                await d.single_flight.record_removal(
                    self.lease, SentRemoval(action.idempotency_key, now, action.instance_id, verb)
                )
        return verdict, ledger

    async def find_offers(self, query: OfferQuery) -> OfferList:
        d = self.decider
        try:
            reply = await d.ctx.broker.connection.request(
                d.ctx.subjects.provision_offers, query.model_dump_json().encode(), timeout=OFFER_REQUEST_TIMEOUT_S
            )
            return OfferList.model_validate_json(reply.data)
        except Exception as error:
            return OfferList(
                occurred_at=d.ctx.clock.now(), source=SERVICE, error=f"offer search failed: {error!r}"[:1000]
            )

    async def request_benchmark(self, request: BenchRequest) -> None:
        d = self.decider
        await publish_event(d.ctx.broker, d.ctx.subjects.bench_request, request, stream=BENCH.name(d.ctx.subjects))

    async def reply_to_operator(self, reply: OperatorReply) -> None:
        d = self.decider
        await publish_event(d.ctx.broker, d.ctx.subjects.operator_reply, reply, stream=OPERATOR.name(d.ctx.subjects))
        if reply.in_reply_to is not None:
            self.answered.add(reply.in_reply_to)
