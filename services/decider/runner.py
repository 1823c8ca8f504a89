"""The decider's imperative shell: triggers in, the timer loop, the lock, one run, commands and the audit out.

One run: take the lock → read inputs → the step's plan (services/decider/step.py: policy and guardrails, pure) →
fast path (hold, nothing P0: no advisor) or the advisor, whose `act` passes the step's guardrails → the plan's
commands when there is no advisor or it degraded → DecisionRecord. Only the lock, the fence, publishing and the
audit are here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from services.decider.advisor import Advisor, AdvisorOutcome, RunInputs
from services.decider.config import DeciderSettings
from services.decider.decision import (
    answers_only,
    clamp_next_check_s,
    reply_without_agent,
    run_outcome,
    snapshot_digest,
)
from services.decider.directive_requests import DirectiveDesk
from services.decider.directive_store import DirectiveMemory, DirectiveStore, InForce
from services.decider.guardrails import (
    FleetLedger,
    GuardrailConfig,
    GuardrailRule,
    SentLaunch,
    SentRemoval,
    worst_price_usd_per_h,
)
from services.decider.inputs import InputReader, RunData
from services.decider.lock import Lease, LockUnavailable, RedisSingleFlight, keep_renewed
from services.decider.metrics import DeciderMetrics
from services.decider.policy import Policy
from services.decider.shadow import offer_query, would_rent
from services.decider.step import OPERATOR_QUESTION, RunPlan, judge, plan_run
from services.decider.triggering import RunBatch, TriggerScheduler, label_of, uncovered
from shared.bus import publish_event
from shared.contract import (
    Action,
    AgentTrace,
    BenchRequest,
    DecisionRecord,
    DestroyInstance,
    DrainInstance,
    GuardrailVerdict,
    LaunchInstances,
    OfferList,
    OfferQuery,
    OperatorMessage,
    OperatorReply,
    ResumeInstance,
    StopInstance,
    Trigger,
    TriggerReason,
    TriggerRef,
)
from shared.contract.directives import Directive
from shared.service import ServiceContext
from shared.streams import AUDIT, BENCH, COMMANDS, OPERATOR

SERVICE = "decider"
OFFER_REQUEST_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0  # a run in progress when the service stops may finish (an advisor call is cut short)
PUBLISH_FAILED = "publish_failed"  # not a guardrail: the bus refused the command
COMMAND_PUBLISH_FAILED = "command_publish_failed"  # the alert kind of a PUBLISH_FAILED (deploy/prometheus/alerts.yml)

log = logging.getLogger("fleetpilot.decider")


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


class Decider:
    def __init__(
        self,
        ctx: ServiceContext,
        config: DeciderSettings,
        metrics: DeciderMetrics,
        single_flight: RedisSingleFlight,
        policy: Policy,
        advisor: Advisor | None = None,
    ) -> None:
        self.ctx = ctx
        # the operator's directives share the lock's connection: a run that holds the lock can read them
        self.directives = DirectiveMemory(DirectiveStore(single_flight.redis, ctx.subjects.prefix))
        self.config = config
        self.metrics = metrics
        self.single_flight = single_flight
        self.policy = policy
        self.advisor = advisor
        self.guardrails: GuardrailConfig = config.guardrail_config(ctx.settings)
        self.scheduler = TriggerScheduler.starting(config.trigger_config(), ctx.clock.now())
        self.inputs = InputReader(
            ctx.broker,
            ctx.subjects,
            source=SERVICE,
            signal_max_age_s=config.signal_max_age_s,
            snapshot_max_age_s=config.snapshot_max_age_s,
            snapshot_request_timeout_s=config.snapshot_request_timeout_s,
        )
        # `fleetpilot directives` and the agent add and revoke through it (app.py serves the requests)
        self.directive_desk = DirectiveDesk(ctx, self.directives.store, self.guardrails, self.inputs, metrics)
        self.operator_messages: dict[str, OperatorMessage] = {}
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._suppressed_seen: dict[str, int] = {}
        self.last_record: DecisionRecord | None = None  # an operator's question is answered from it too

    # --- triggers in --------------------------------------------------------------------------------------

    def on_trigger(self, trigger: Trigger) -> None:
        self.metrics.triggers.labels(trigger.priority, trigger.reason.value).inc()
        ref = TriggerRef(priority=trigger.priority, reason=trigger.reason, event_id=trigger.event_id)
        self.scheduler.offer(ref, self.ctx.clock.now())
        self._wake.set()

    def on_operator_message(self, message: OperatorMessage) -> None:
        """An operator message is a P0 trigger; the run that takes it passes the text to the advisor."""
        self.metrics.triggers.labels("p0", TriggerReason.OPERATOR_MESSAGE.value).inc()
        self.operator_messages[message.event_id] = message
        ref = TriggerRef(priority="p0", reason=TriggerReason.OPERATOR_MESSAGE, event_id=message.event_id)
        self.scheduler.offer(ref, self.ctx.clock.now())
        self._wake.set()

    # --- the loop -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop(), name="decider-loop")

    async def stop(self) -> None:
        """Let the loop finish the run in progress (within STOP_TIMEOUT_S), then close the lock's connection."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            done, _ = await asyncio.wait({self._loop_task}, timeout=STOP_TIMEOUT_S)
            if not done:
                self._loop_task.cancel()
        await self.single_flight.close()

    async def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            now = self.ctx.clock.now()
            batch = self.scheduler.poll(now)
            self._count_suppressed()
            if batch is None:
                await self._sleep_until(self.scheduler.next_wake_at(now), now)
                continue
            try:
                await self.run_batch(batch)
            except Exception:
                log.exception("decider run failed; triggers kept for the next one")
                if self.scheduler.running:
                    self.scheduler.abandon(self.ctx.clock.now() + timedelta(seconds=self.config.lock_retry_s))

    async def _sleep_until(self, wake_at: datetime | None, now: datetime) -> None:
        """Until the scheduler's next deadline or a new trigger, whichever comes first."""
        waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(self._wake.wait())]
        if wake_at is not None:
            waiters.append(asyncio.ensure_future(self.ctx.clock.sleep((wake_at - now).total_seconds())))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _count_suppressed(self) -> None:
        for label, count in self.scheduler.suppressed_runs.items():
            new = count - self._suppressed_seen.get(label, 0)
            if new > 0:
                self.metrics.suppressed_runs.labels(label).inc(new)
                log.warning("rate limit: suppressed a %s run (%d this process)", label, count)
            self._suppressed_seen[label] = count

    def alert(self, kind: str, message: str) -> None:
        """Alert level: logged as an error with ALERT and counted, for Prometheus alert rules."""
        self.metrics.alerts.labels(kind).inc()
        log.error("ALERT %s: %s", kind, message)

    # --- one run under the lock ---------------------------------------------------------------------------

    async def run_batch(self, batch: RunBatch) -> DecisionRecord | None:
        now = self.ctx.clock.now()
        try:
            lease = await self.single_flight.acquire()
        except LockUnavailable as error:
            self.metrics.lock_available.set(0)
            self.metrics.lock_attempts.labels("unavailable").inc()
            self.alert("redis_unavailable", f"cannot take the single-flight lock, holding (no actions): {error}")
            self.scheduler.abandon(now + timedelta(seconds=self.config.redis_retry_s))
            return None
        self.metrics.lock_available.set(1)
        if lease is None:
            self.metrics.lock_attempts.labels("busy").inc()
            self.scheduler.abandon(now + timedelta(seconds=self.config.lock_retry_s))
            return None
        self.metrics.lock_attempts.labels("acquired").inc()
        self.metrics.lock_held.set(1)
        renewing = asyncio.create_task(keep_renewed(self.single_flight, lease))
        begun = False
        try:
            shared = await self.single_flight.shared_state(batch.event_ids, now)
            for at in await self.single_flight.wakeups_after(now):
                self.scheduler.schedule_wakeup(at)
            refs = uncovered(
                batch,
                covered_event_ids=shared.covered_event_ids,
                last_run_elsewhere_at=shared.last_run_started_at,
                now=now,
                heartbeat_s=self.config.heartbeat_s,
            )
            if not refs:
                self.metrics.skipped_runs.inc()
                self.scheduler.skip(batch, now, shared.last_run_started_at)
                self._forget_messages(batch)
                return None
            started_at = self.ctx.clock.now()
            self.scheduler.begin(batch, started_at)
            begun = True
            try:
                record = await self._run(lease, refs, started_at)
            finally:
                self._forget_messages(batch)
            await self.single_flight.record_run(lease, started_at, batch.event_ids)
            return record
        except LockUnavailable as error:
            self.alert("redis_unavailable", f"lost Redis during a run, holding: {error}")
            if not begun:
                self.scheduler.abandon(now + timedelta(seconds=self.config.redis_retry_s))
            return None
        finally:
            renewing.cancel()
            self.metrics.lock_held.set(0)
            with contextlib.suppress(LockUnavailable):
                await self.single_flight.release(lease)
            if begun:
                self.scheduler.finish(self.ctx.clock.now())

    def _forget_messages(self, batch: RunBatch) -> None:
        """Operator messages of a batch are handled by this run or were by another replica's."""
        for event_id in batch.event_ids:
            self.operator_messages.pop(event_id, None)

    async def _run(self, lease: Lease, refs: tuple[TriggerRef, ...], started_at: datetime) -> DecisionRecord:
        wall_start = time.perf_counter()  # the duration metric is wall time whatever the service clock
        run_id = f"{self.config.replica_id}-{uuid.uuid4().hex[:16]}"
        data = await self.inputs.read(started_at)
        if data.stale:
            self.alert(
                "stale_inputs",
                f"signal {data.signal_freshness}, snapshot {data.snapshot_freshness}: holding, no actions",
            )
        try:
            sent = await self.single_flight.recent_launches(started_at)
            removals = await self.single_flight.recent_removals(started_at)
        except LockUnavailable:
            lease.lost, sent, removals = True, [], []
        in_force = await self._directives_in_force(started_at)
        has_p0 = any(r.priority == "p0" for r in refs)
        answer_only = answers_only(refs)
        stale_inputs = f"signal {data.signal_freshness}, snapshot {data.snapshot_freshness}" if data.stale else None
        plan = self._plan(
            data,
            sent,
            started_at,
            run_id,
            stale_inputs=stale_inputs,
            answer_only=answer_only,
            removals=removals,
            directives=in_force.directives,
        )
        explanation = plan.explanation
        if in_force.problem is not None:
            explanation += f"; directives: {in_force.problem}"
        messages = [self.operator_messages[r.event_id] for r in refs if r.event_id in self.operator_messages]
        inputs = RunInputs(
            run_id=run_id,
            now=started_at,
            triggers=list(refs),
            signal=data.signal,
            snapshot=data.snapshot,
            recommendation=explanation,
            recommended_actions=list(plan.actions),
            operator_messages=messages,
            stale=data.stale,
            directives=in_force.directives,
        )
        if answer_only and any(ref.reason is not TriggerReason.OPERATOR_MESSAGE for ref in refs):
            # the fleet's own triggers that shared this run are acted on by a follow-up run, without the question
            self.scheduler.schedule_wakeup(started_at)
        ports = RunPorts(self, lease, plan.ledger_at_start, answer_only=answer_only, guardrails=plan.guardrails)
        outcome: AdvisorOutcome | None = None
        degraded = False
        if data.stale:
            if messages and self.advisor:
                outcome = await self._advise(inputs, ports)  # it may explain; every act is refused as stale
        elif (plan.recommendation is None or plan.recommendation.is_hold) and not has_p0:
            self.metrics.fast_path.inc()
        elif self.advisor:
            outcome = await self._advise(inputs, ports)
            degraded = outcome.status == "degraded"
            if degraded:
                # the policy again, counting what the advisor already launched this run
                again = self._plan(
                    data,
                    sent,
                    started_at,
                    f"{run_id}-p",
                    answer_only=answer_only,
                    ledger=ports.ledger,
                    launched_this_run=ports.launched,
                    directives=in_force.directives,
                )
                await ports.carry_out(again, started_at)
        else:
            await ports.carry_out(plan, started_at)
        if messages and (self.advisor is None or degraded):
            await self._reply_without_agent(ports, messages, explanation, started_at)
        return await self._finish(
            lease, run_id, refs, started_at, wall_start, data, explanation, ports, outcome, degraded, in_force
        )

    def _plan(
        self,
        data: RunData,
        sent: list[SentLaunch],
        now: datetime,
        run_id: str,
        *,
        stale_inputs: str | None = None,
        answer_only: bool = False,
        ledger: FleetLedger | None = None,
        launched_this_run: int = 0,
        removals: Sequence[SentRemoval] = (),
        directives: Sequence[Directive] = (),
    ) -> RunPlan:
        """The step on this run's inputs; a policy that raised is alerted here (the plan holds)."""
        plan = plan_run(
            data.signal,
            data.snapshot,
            sent,
            now,
            self.policy,
            self.guardrails,
            run_id=run_id,
            stale_inputs=stale_inputs,
            answer_only=answer_only,
            ledger=ledger,
            launched_this_run=launched_this_run,
            removals=removals,
            directives=directives,
        )
        if plan.policy_error is not None:
            log.error("policy failed", exc_info=plan.policy_error)
            self.alert("policy_error", f"policy failed, holding: {plan.policy_error!r}")
        return plan

    async def _directives_in_force(self, now: datetime) -> InForce:
        """The operator's directives this run enforces; when the store cannot be read, those read last (an alert)."""
        in_force = await self.directives.in_force(now)
        if in_force.problem is not None:
            self.alert("directives_unreadable", in_force.problem)
        self.metrics.directives_in_force.set(len(in_force.directives))
        return in_force

    async def _advise(self, inputs: RunInputs, ports: RunPorts) -> AdvisorOutcome:
        assert self.advisor is not None
        try:
            return await asyncio.wait_for(self.advisor.advise(inputs, ports), timeout=self.config.advisor_timeout_s)
        except Exception as error:  # the model being slow, wrong or down must never stop the decider
            log.error("advisor failed, applying the policy alone: %r", error)
            trace = AgentTrace(status="degraded", decision=f"advisor failed: {error!r}"[:8000])
            return AdvisorOutcome(trace=trace, status="degraded")

    async def _reply_without_agent(
        self, ports: RunPorts, messages: list[OperatorMessage], explanation: str, now: datetime
    ) -> None:
        text = reply_without_agent(explanation, ports.verdicts, answer_only=ports.answer_only, last=self.last_record)
        for message in messages:
            if message.event_id in ports.answered:
                continue  # the agent answered before it degraded: one question, one answer (the audit has the rest)
            reply = OperatorReply(
                occurred_at=now,
                source=SERVICE,
                conversation_id=message.conversation_id,
                in_reply_to=message.event_id,
                text=text,
            )
            try:
                await ports.reply_to_operator(reply)
            except Exception as error:
                log.error("could not reply to operator message %s: %r", message.event_id, error)

    async def _finish(
        self,
        lease: Lease,
        run_id: str,
        refs: tuple[TriggerRef, ...],
        started_at: datetime,
        wall_start: float,
        data: RunData,
        explanation: str,
        ports: RunPorts,
        outcome: AdvisorOutcome | None,
        degraded: bool,
        in_force: InForce,
    ) -> DecisionRecord:
        finished_at = max(self.ctx.clock.now(), started_at)
        result = run_outcome(
            stale=data.stale, degraded=degraded, verdicts=ports.verdicts, commands_sent=ports.commands_sent
        )
        record = DecisionRecord(
            occurred_at=finished_at,
            source=SERVICE,
            run_id=run_id,
            fencing_token=lease.token,
            triggers=list(refs),
            started_at=started_at,
            finished_at=finished_at,
            duration_s=(finished_at - started_at).total_seconds(),
            signal_freshness=data.signal_freshness,
            snapshot_freshness=data.snapshot_freshness,
            signal=data.signal,
            snapshot_digest=snapshot_digest(data.snapshot),
            recommendation=explanation[:4000],
            verdicts=ports.verdicts,
            commands_sent=ports.commands_sent,
            mode=self.ctx.settings.decider_mode,
            commands_withheld=ports.commands_withheld,
            outcome=result,
            agent=outcome.trace if outcome else None,
            directives=[directive.directive_id for directive in in_force.directives],
        )
        self.last_record = record
        try:
            await publish_event(
                self.ctx.broker, self.ctx.subjects.decision_audit, record, stream=AUDIT.name(self.ctx.subjects)
            )
        except Exception as error:
            log.error("could not publish the decision record of %s: %r", run_id, error)
        next_check_s = clamp_next_check_s(outcome.next_check_s if outcome else None)
        if next_check_s is not None:
            at = finished_at + timedelta(seconds=next_check_s)
            self.scheduler.schedule_wakeup(at)
            with contextlib.suppress(LockUnavailable):
                await self.single_flight.add_wakeup(lease, at)
        self.metrics.runs.labels(label_of(list(refs)), result).inc()
        self.metrics.run_duration.observe(time.perf_counter() - wall_start)
        log.info("run %s [%s → %s] %s", run_id, label_of(list(refs)), result, explanation[:300])
        return record
