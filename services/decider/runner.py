"""The decider's imperative shell: triggers in, the timer loop, the lock, one run, commands and the audit out.

One run: take the lock → read its basis (run_basis.py) → the step's plan (services/decider/step.py: policy and
guardrails, pure) → fast path (hold, nothing P0: no advisor) or the advisor, whose `act` passes the step's
guardrails (run_ports.py) → the plan's commands when there is no advisor or it degraded → DecisionRecord
(audit.py). Only the lock, the fence, publishing and the audit are here and in those modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from datetime import datetime, timedelta

from services.decider import SERVICE
from services.decider.advisor import Advisor, AdvisorOutcome, RunInputs
from services.decider.audit import decision_record, publish_record
from services.decider.config import DeciderSettings
from services.decider.decision import clamp_next_check_s, reply_without_agent, run_outcome
from services.decider.directive_requests import DirectiveDesk
from services.decider.directive_store import DirectiveMemory, DirectiveStore, InForce
from services.decider.guardrails import GuardrailConfig
from services.decider.inputs import InputReader
from services.decider.lock import Lease, LockUnavailable, RedisSingleFlight, keep_renewed
from services.decider.metrics import DeciderMetrics
from services.decider.policy import Policy
from services.decider.run_basis import RunBasis
from services.decider.run_ports import RunPorts
from services.decider.step import RunPlan
from services.decider.triggering import RunBatch, TriggerScheduler, label_of, uncovered
from shared.contract import (
    AgentTrace,
    DecisionRecord,
    OperatorMessage,
    OperatorReply,
    Trigger,
    TriggerReason,
    TriggerRef,
)
from shared.service import ServiceContext

# three runs in a row that raised (a retry a second apart each): not a blip, the decider has stopped deciding
FAILED_RUNS_UNHEALTHY = 3
STOP_TIMEOUT_S = 10.0  # a run in progress when the service stops may finish (an advisor call is cut short)

log = logging.getLogger("fleetpilot.decider")


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
        # runs that raised since the last one that did not, and the latest error: /health says so from a few on
        self.failed_runs_in_a_row = 0
        self.last_run_error = ""

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
                self.failed_runs_in_a_row = 0
            except Exception as error:
                log.exception("decider run failed; triggers kept for the next one")
                self.failed_runs_in_a_row += 1
                self.last_run_error = f"{type(error).__name__}: {error}"[:200]
                if self.scheduler.running:
                    self.scheduler.abandon(self.ctx.clock.now() + timedelta(seconds=self.config.lock_retry_s))

    def not_deciding(self) -> str | None:
        """A health check: a decider whose loop died, or whose every run raises, decides nothing, whatever its
        connections say (both were seen with /health answering healthy)."""
        task = self._loop_task
        if task is not None and task.done() and not task.cancelled() and not self._stopping:
            error = task.exception()
            return f"the decider's loop stopped: {type(error).__name__}: {error}"[:300]
        if self.failed_runs_in_a_row < FAILED_RUNS_UNHEALTHY:
            return None
        return f"the last {self.failed_runs_in_a_row} decider runs failed (latest: {self.last_run_error})"

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
        basis = await self._read(lease, refs, started_at)
        data = basis.data
        has_p0 = any(r.priority == "p0" for r in refs)
        plan = self._plan(basis, basis.run_id)
        explanation = plan.explanation
        if basis.in_force.problem is not None:
            explanation += f"; directives: {basis.in_force.problem}"
        messages = [self.operator_messages[r.event_id] for r in refs if r.event_id in self.operator_messages]
        inputs = RunInputs(
            run_id=basis.run_id,
            now=started_at,
            triggers=list(refs),
            signal=data.signal,
            snapshot=data.snapshot,
            recommendation=explanation,
            recommended_actions=list(plan.actions),
            operator_messages=messages,
            stale=data.stale,
            directives=basis.in_force.directives,
        )
        if basis.answer_only and any(ref.reason is not TriggerReason.OPERATOR_MESSAGE for ref in refs):
            # the fleet's own triggers that shared this run are acted on by a follow-up run, without the question
            self.scheduler.schedule_wakeup(started_at)
        ports = RunPorts(self, lease, plan.ledger_at_start, answer_only=basis.answer_only, guardrails=plan.guardrails)
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
                again = self._plan(basis, f"{basis.run_id}-p", after=ports)
                await ports.carry_out(again, started_at)
        else:
            await ports.carry_out(plan, started_at)
        if messages and (self.advisor is None or degraded):
            await self._reply_without_agent(ports, messages, explanation, started_at)
        return await self._finish(basis, wall_start, explanation, ports, outcome, degraded)

    async def _read(self, lease: Lease, refs: tuple[TriggerRef, ...], started_at: datetime) -> RunBasis:
        """The run's basis: the inputs (an alert when stale), the commands in flight, the directives in force."""
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
        return RunBasis(run_id, refs, started_at, data, sent, removals, in_force)

    def _plan(self, basis: RunBasis, run_id: str, *, after: RunPorts | None = None) -> RunPlan:
        """The step on this run's basis, or after what the run's ports already did; a policy that raised is
        alerted here (the plan holds)."""
        if after is None:
            plan = basis.plan(self.policy, self.guardrails, run_id)
        else:
            plan = basis.plan(
                self.policy, self.guardrails, run_id, ledger=after.ledger, launched_this_run=after.launched
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
        basis: RunBasis,
        wall_start: float,
        explanation: str,
        ports: RunPorts,
        outcome: AdvisorOutcome | None,
        degraded: bool,
    ) -> DecisionRecord:
        finished_at = max(self.ctx.clock.now(), basis.started_at)
        result = run_outcome(
            stale=basis.data.stale, degraded=degraded, verdicts=ports.verdicts, commands_sent=ports.commands_sent
        )
        record = decision_record(
            basis,
            ports,
            explanation=explanation,
            outcome=outcome,
            result=result,
            finished_at=finished_at,
            mode=self.ctx.settings.decider_mode,
        )
        self.last_record = record
        await publish_record(self.ctx, record)
        next_check_s = clamp_next_check_s(outcome.next_check_s if outcome else None)
        if next_check_s is not None:
            at = finished_at + timedelta(seconds=next_check_s)
            self.scheduler.schedule_wakeup(at)
            with contextlib.suppress(LockUnavailable):
                await self.single_flight.add_wakeup(ports.lease, at)
        refs = list(basis.triggers)
        self.metrics.runs.labels(label_of(refs), result).inc()
        self.metrics.run_duration.observe(time.perf_counter() - wall_start)
        log.info("run %s [%s → %s] %s", basis.run_id, label_of(refs), result, explanation[:300])
        return record
