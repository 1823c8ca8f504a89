"""The decider in-process on real NATS and Redis: triggers in, guardrailed commands and the audit record out."""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from services.decider.app import wire
from services.decider.config import DeciderSettings
from services.decider.guardrails import GuardrailRule
from shared.clock import RealClock
from shared.contract import (
    AgentTrace,
    DeadLetter,
    DemandState,
    GuardrailVerdict,
    LaunchInstances,
    OperatorMessage,
    OperatorReply,
    Trigger,
    TriggerReason,
)
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import OPERATOR, TRIGGERS
from sim.infra import RedisServer
from tests.decider.factories import producing, signal, snapshot
from tests.decider.harness import (
    FAST,
    audit_log,
    collect,
    publish,
    publish_inputs,
    publish_trigger,
    queued_commands,
    running_decider,
    sample,
)
from tests.helpers import eventually


def now() -> datetime:
    return datetime.now(UTC)


def trigger(priority: str = "p0", reason: TriggerReason = TriggerReason.INSTANCE_FAILED) -> Trigger:
    return Trigger(occurred_at=now(), source="fleet", priority=priority, reason=reason)  # type: ignore[arg-type]


async def served_fleet(js: JetStreamContext, settings: Settings) -> None:
    t = now()
    await publish_inputs(js, settings, signal(t, pending=8, rate_per_h=300, producing_workers=4),
                         snapshot(t, producing(4, t)))  # fmt: skip


async def short_fleet(js: JetStreamContext, settings: Settings, *, age_s: float = 0.0) -> None:
    """600 tasks/h sustained against 2 machines: the policy launches 8."""
    t = now()
    demand = signal(t, pending=8, rate_per_h=600, producing_workers=2, above_capacity_for_s=1800,
                    state=DemandState.UNDER_PROVISIONED, age_s=age_s)  # fmt: skip
    await publish_inputs(js, settings, demand, snapshot(t, producing(2, t)))


@dataclass
class ScriptedAdvisor:
    """A stand-in for the agent: records what it was given and does what the test scripts."""

    status: str = "ok"
    act_on: list[str] = field(default_factory=list)  # "recommended", "oversized", "reply", "raise"
    next_check_s: int | None = None
    calls: list[RunInputs] = field(default_factory=list)
    verdicts: list[GuardrailVerdict] = field(default_factory=list)

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        self.calls.append(inputs)
        for step in self.act_on:
            if step == "raise":
                raise ConnectionError("model unreachable")
            if step == "reply":
                for message in inputs.operator_messages:
                    reply = OperatorReply(
                        occurred_at=inputs.now, source="decider", conversation_id=message.conversation_id,
                        in_reply_to=message.event_id, text="the agent's answer",
                    )  # fmt: skip
                    await ports.reply_to_operator(reply)
            if step == "recommended":
                for action in inputs.recommended_actions:
                    self.verdicts.append(await ports.act(action))
            if step == "oversized":
                launch = LaunchInstances(
                    occurred_at=inputs.now, source="decider", idempotency_key=f"{inputs.run_id}-agent",
                    requested_by="agent", count=100, launch_priority="normal", reason="operator_request",
                )  # fmt: skip
                self.verdicts.append(await ports.act(launch))
        return AdvisorOutcome(
            trace=AgentTrace(decision="scripted", status="ok" if self.status == "ok" else "degraded"),
            status=self.status,  # type: ignore[arg-type]
            next_check_s=self.next_check_s,
        )


async def launch_commands(js: JetStreamContext, settings: Settings) -> list[LaunchInstances]:
    return await queued_commands(js, settings, "launch", LaunchInstances)


async def test_a_p0_trigger_runs_at_once_and_the_run_is_audited(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    async with running_decider(settings) as (_, ctx):
        p0 = trigger()
        await publish_trigger(js, settings, p0)
        await eventually(lambda: audit.items)
        record = audit.items[0]
        assert [ref.event_id for ref in record.triggers] == [p0.event_id]
        assert record.outcome == "hold" and record.commands_sent == []
        assert record.fencing_token is not None and record.fencing_token >= 1
        assert record.signal is not None and record.signal.pending_tasks == 8
        assert record.signal_freshness == "fresh" and record.snapshot_freshness == "fresh"
        assert "4 instances" in record.snapshot_digest and "#100 RTX 4090 producing" in record.snapshot_digest
        assert record.recommendation.startswith("hold:")
        assert record.started_at <= record.finished_at
        assert sample(ctx, "fleetpilot_decider_runs_total", trigger="p0", outcome="hold") == 1


async def test_the_fast_path_skips_the_advisor_unless_something_is_p0(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    advisor = ScriptedAdvisor()
    async with running_decider(settings, advisor) as (_, ctx):
        for _ in range(5):
            await publish_trigger(js, settings, trigger("p1", TriggerReason.INSTANCE_TRANSITION))
        await eventually(lambda: audit.items)
        assert audit.items[0].outcome == "hold" and len(audit.items[0].triggers) == 5
        assert advisor.calls == []  # policy holds and nothing is P0: no model call
        assert sample(ctx, "fleetpilot_decider_fast_path_total") == 1
        await publish_trigger(js, settings, trigger("p0"))
        await eventually(lambda: len(audit.items) == 2)
        assert len(advisor.calls) == 1 and advisor.calls[0].triggers[0].priority == "p0"
        assert advisor.calls[0].recommendation.startswith("hold:")


async def test_without_an_advisor_the_policy_acts_through_the_guardrails(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await short_fleet(js, settings)
    audit = await audit_log(nc, settings)
    async with running_decider(settings) as (_, ctx):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        record = audit.items[0]
        assert record.outcome == "acted"
        commands = await launch_commands(js, settings)
        assert [c.idempotency_key for c in commands] == record.commands_sent
        assert sum(c.count for c in commands) == 8 and commands[0].requested_by == "policy"
        assert [v.verdict for v in record.verdicts] == ["allowed"]
        # the next run counts those launches as arriving, although the snapshot does not show them yet
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: len(audit.items) == 2)
        assert audit.items[1].outcome == "hold", audit.items[1].recommendation
        assert "8 arriving" in audit.items[1].recommendation
        assert sample(ctx, "fleetpilot_decider_commands_total", verb="launch") == 1


async def test_the_advisor_acts_through_the_guardrails_and_schedules_a_check(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await short_fleet(js, settings)
    audit = await audit_log(nc, settings)
    advisor = ScriptedAdvisor(act_on=["recommended", "oversized"], next_check_s=5)
    async with running_decider(settings, advisor) as (decider, ctx):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        record = audit.items[0]
        assert record.outcome == "acted" and record.agent is not None and record.agent.decision == "scripted"
        assert [v.verdict for v in advisor.verdicts] == ["allowed", "allowed"]
        # 100 asked, trimmed by the budget after the policy's 8: $20/h less $1 spent and 8 × $0.80 committed,
        # at $0.80 each: 15 (the launch rate allows as many launches an hour as instances)
        oversized = advisor.verdicts[1]
        assert oversized.rule == GuardrailRule.BUDGET and oversized.action.count == 15  # type: ignore[union-attr]
        assert sample(ctx, "fleetpilot_guardrail_refusals_total", rule="budget_usd_per_h") == 1
        assert len(record.verdicts) == 2 and len(record.commands_sent) == 2
        # next_check_s is clamped to 30..3600 and becomes a wake-up (scheduled after the record is published: on a
        # loaded machine the test read the record first)
        await eventually(lambda: len(decider.scheduler.wakeups) == 1)
        delay_s = (decider.scheduler.wakeups[0] - record.finished_at).total_seconds()
        assert delay_s == 30


async def test_a_degraded_or_failing_advisor_falls_back_to_the_policy(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await short_fleet(js, settings)
    audit = await audit_log(nc, settings)
    advisor = ScriptedAdvisor(act_on=["raise"])
    async with running_decider(settings, advisor):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        record = audit.items[0]
        assert record.outcome == "degraded"
        assert record.agent is not None and "model unreachable" in record.agent.decision
        assert len(record.commands_sent) == 1
        commands = await launch_commands(js, settings)
        assert sum(c.count for c in commands) == 8
        # each command carries the run's lock token, for the provisioner's fence
        assert record.fencing_token is not None and {c.fencing_token for c in commands} == {record.fencing_token}


async def test_stale_inputs_only_hold_and_alert(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    await short_fleet(js, settings, age_s=1200)
    audit = await audit_log(nc, settings)
    advisor = ScriptedAdvisor(act_on=["recommended"])
    async with running_decider(settings, advisor) as (_, ctx):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        record = audit.items[0]
        assert record.outcome == "stale" and record.signal_freshness == "stale"
        assert record.commands_sent == [] and advisor.calls == []
        assert record.recommendation.startswith("hold, inputs stale")
        assert sample(ctx, "fleetpilot_decider_alerts_total", kind="stale_inputs") == 1
        assert await launch_commands(js, settings) == []


async def test_missing_inputs_hold(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    audit = await audit_log(nc, settings)
    async with running_decider(settings):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        assert audit.items[0].outcome == "stale" and audit.items[0].snapshot_freshness == "missing"


async def test_redis_down_holds_with_an_alert_and_runs_once_it_is_back(
    settings: Settings, nc: NatsClient, js: JetStreamContext, redis_server: RedisServer
) -> None:
    await short_fleet(js, settings)
    audit = await audit_log(nc, settings)
    async with running_decider(settings) as (_, ctx):
        redis_server.stop()
        p0 = trigger()
        await publish_trigger(js, settings, p0)
        await eventually(lambda: sample(ctx, "fleetpilot_decider_alerts_total", kind="redis_unavailable") >= 2)
        assert sample(ctx, "fleetpilot_decider_lock_backend_up") == 0
        assert audit.items == [] and await launch_commands(js, settings) == []
        redis_server.start()
        await eventually(lambda: audit.items, timeout_s=15)
        assert audit.items[0].triggers[0].event_id == p0.event_id
        assert sample(ctx, "fleetpilot_decider_lock_backend_up") == 1


@dataclass
class LockThief:
    """Simulates a stall past the lock's expiry: another replica takes the lock mid-run, then this one acts."""

    redis_url: str
    namespace: str
    verdicts: list[GuardrailVerdict] = field(default_factory=list)

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(self.redis_url)
        await client.set(f"{self.namespace}:decider:lock", "other-replica:99")
        await client.aclose()
        for action in inputs.recommended_actions:
            self.verdicts.append(await ports.act(action))
        return AdvisorOutcome(trace=AgentTrace(), status="ok")


async def test_a_holder_that_lost_the_lock_cannot_act(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    await short_fleet(js, settings)
    audit = await audit_log(nc, settings)
    thief = LockThief(settings.redis_url, settings.subject_prefix)
    async with running_decider(settings, thief) as (_, ctx):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        assert [v.rule for v in thief.verdicts] == [GuardrailRule.LOCK_LOST]
        assert audit.items[0].outcome == "refused" and audit.items[0].commands_sent == []
        assert await launch_commands(js, settings) == []
        assert sample(ctx, "fleetpilot_decider_alerts_total", kind="lock_lost") == 1


async def test_an_operator_message_is_p0_and_answered_without_an_agent(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    replies = await collect(nc, settings.subjects.operator_reply, OperatorReply)
    message = OperatorMessage(occurred_at=now(), source="cli", conversation_id="c1", operator="ana", text="status?")
    async with running_decider(settings):
        await publish(js, settings.subjects.operator_message, message, OPERATOR.name(settings.subjects))
        await eventually(lambda: audit.items and replies.items)
        assert audit.items[0].triggers[0].reason == TriggerReason.OPERATOR_MESSAGE
        reply = replies.items[0]
        assert reply.in_reply_to == message.event_id and reply.conversation_id == "c1"
        assert "hold:" in reply.text


async def test_an_operator_answered_by_the_agent_before_it_degraded_gets_no_second_reply(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    replies = await collect(nc, settings.subjects.operator_reply, OperatorReply)
    answered = OperatorMessage(occurred_at=now(), source="cli", conversation_id="c3", operator="ana", text="why?")
    async with running_decider(settings, ScriptedAdvisor(status="degraded", act_on=["reply"])):
        await publish(js, settings.subjects.operator_message, answered, OPERATOR.name(settings.subjects))
        await eventually(lambda: audit.items)
        assert audit.items[0].outcome == "degraded"
    unanswered = OperatorMessage(occurred_at=now(), source="cli", conversation_id="c4", operator="ana", text="and?")
    async with running_decider(settings, ScriptedAdvisor(status="degraded")):
        await publish(js, settings.subjects.operator_message, unanswered, OPERATOR.name(settings.subjects))
        await eventually(lambda: len(audit.items) == 2 and len(replies.items) == 2)
    assert [(r.conversation_id, r.text.startswith("The agent is not available")) for r in replies.items] == [
        ("c3", False),
        ("c4", True),
    ]


async def test_operator_messages_reach_the_advisor(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    advisor = ScriptedAdvisor()
    message = OperatorMessage(occurred_at=now(), source="cli", conversation_id="c2", operator="ana", text="scale up")
    async with running_decider(settings, advisor):
        await publish(js, settings.subjects.operator_message, message, OPERATOR.name(settings.subjects))
        await eventually(lambda: audit.items)
        assert [m.text for m in advisor.calls[0].operator_messages] == ["scale up"]


async def test_a_malformed_trigger_is_dead_lettered_and_the_next_one_runs(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)
    letters = await collect(nc, settings.subjects.dead_letter("decider"), DeadLetter)
    async with running_decider(settings):
        bad = json.loads(trigger().model_dump_json())
        bad["priority"] = "p7"
        subject = settings.subjects.trigger("p0", TriggerReason.INSTANCE_DEAD)
        await js.publish(subject, json.dumps(bad).encode(), stream=TRIGGERS.name(settings.subjects))
        good = trigger()
        await publish_trigger(js, settings, good)
        await eventually(lambda: letters.items and audit.items)
        assert "priority" in letters.items[0].error and "p7" in letters.items[0].error
        assert audit.items[0].triggers[0].event_id == good.event_id


async def test_triggers_during_a_run_give_one_follow_up_run(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await served_fleet(js, settings)
    audit = await audit_log(nc, settings)

    @dataclass
    class Slow:
        started: asyncio.Event = field(default_factory=asyncio.Event)
        release: asyncio.Event = field(default_factory=asyncio.Event)

        async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
            self.started.set()
            await self.release.wait()
            return AdvisorOutcome(trace=AgentTrace(), status="ok")

    slow = Slow()
    async with running_decider(settings, slow) as (decider, _):
        await publish_trigger(js, settings, trigger())
        await asyncio.wait_for(slow.started.wait(), 10)
        during = [trigger() for _ in range(4)]
        for t in during:
            await publish_trigger(js, settings, t)
        await eventually(lambda: len(decider.scheduler.pending) == 4)
        assert decider.scheduler.follow_up_pending
        slow.release.set()
        await eventually(lambda: len(audit.items) == 2)
        assert {r.event_id for r in audit.items[1].triggers} == {t.event_id for t in during}
        await asyncio.sleep(0.3)
        assert len(audit.items) == 2


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("heartbeat_s", r"the decider's loop stopped: OverflowError"),  # the scheduler raised outside any run
        ("lock_ttl_s", r"the last \d+ decider runs failed \(latest: OverflowError"),  # raised in each run
    ],
)
async def test_a_decider_that_stopped_deciding_says_so_on_its_health(
    settings: Settings, nc: NatsClient, js: JetStreamContext, setting: str, said: str
) -> None:
    """An infinite heartbeat or lock life (what the settings now refuse) stopped every decision while /health
    answered healthy."""
    config = DeciderSettings(**FAST).model_copy(update={setting: math.inf})
    ctx = ServiceContext("decider", settings, RealClock())
    app, _ = wire(ctx, None, config=config)
    await app.start()
    try:
        await short_fleet(js, settings)
        await publish_trigger(js, settings, trigger())
        reasons = await eventually(lambda: ctx.unhealthy_reasons(connected=True))
        assert len(reasons) == 1 and re.match(said, reasons[0]), reasons
    finally:
        await app.stop()
