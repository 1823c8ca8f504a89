"""Runs that decide without acting: shadow mode (FLEETPILOT_DECIDER_MODE=shadow) and an operator's question."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from services.decider.step import OPERATOR_QUESTION
from shared.contract import OfferLine, OfferList, OfferQuery, OperatorMessage, OperatorReply, TriggerReason
from shared.settings import Settings
from shared.streams import OPERATOR
from tests.decider.harness import audit_log, collect, publish, publish_trigger, running_decider
from tests.decider.test_decider_app import launch_commands, now, short_fleet, trigger
from tests.helpers import eventually


async def test_in_shadow_mode_the_decider_decides_and_audits_but_sends_nothing(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await short_fleet(js, settings)  # the policy launches 8
    audit = await audit_log(nc, settings)
    async with running_decider(settings.model_copy(update={"decider_mode": "shadow"})):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
    record = audit.items[0]
    assert record.mode == "shadow" and record.commands_sent == []
    [verdict] = record.verdicts
    assert verdict.verdict == "allowed" and verdict.explanation.startswith("shadow mode, not sent;")
    # nothing answers offer searches here: the record says the offers are unknown, not that there are none
    assert "would rent 8: offers unknown" in verdict.explanation
    assert record.commands_withheld == [verdict.action.idempotency_key]
    assert await launch_commands(js, settings) == []


async def test_a_shadow_run_names_the_offers_its_launch_would_rent(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    """The provisioner's ranking answers the search (here a responder on its subject, as the provisioner's
    own tests check the ranking); the withheld launch of 8 names the 3 offers that match and their $/h."""
    queries: list[OfferQuery] = []

    async def answer(msg: Msg) -> None:
        query = OfferQuery.model_validate_json(msg.data)
        queries.append(query)
        lines = [
            OfferLine(offer_id=70 + i, gpu_model="RTX 4090", num_gpus=1, price_usd_per_h=0.40 + i / 10,
                      reliability=0.99, expected_usd_per_task=0.004, host_id=900 + i)
            for i in range(3)
        ]  # fmt: skip
        await msg.respond(OfferList(occurred_at=now(), source="provisioner", offers=lines).model_dump_json().encode())

    await nc.subscribe(settings.subjects.provision_offers, cb=answer)
    await short_fleet(js, settings)  # the policy launches 8
    audit = await audit_log(nc, settings)
    async with running_decider(settings.model_copy(update={"decider_mode": "shadow"})):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
    [verdict] = audit.items[0].verdicts
    assert [q.limit for q in queries] == [8]
    assert "would rent 3 (only 3 of 8 match) at $1.50/h: offer 70 RTX 4090 x1 $0.40/h host 900;" in verdict.explanation
    assert "offer 72 RTX 4090 x1 $0.60/h host 902" in verdict.explanation


async def test_a_live_run_says_so_in_its_record(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    await short_fleet(js, settings)
    audit = await audit_log(nc, settings)
    async with running_decider(settings):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
    record = audit.items[0]
    assert record.mode == "live" and record.commands_withheld == [] and len(record.commands_sent) == 1


async def test_an_operator_question_is_answered_and_starts_no_action(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await short_fleet(js, settings)  # a run would launch 8: the question's run must not
    audit = await audit_log(nc, settings)
    replies = await collect(nc, settings.subjects.operator_reply, OperatorReply)
    question = OperatorMessage(occurred_at=now(), source="cli", conversation_id="c9", operator="ana", text="why?")
    async with running_decider(settings):
        await publish(js, settings.subjects.operator_message, question, OPERATOR.name(settings.subjects))
        await eventually(lambda: audit.items and replies.items)
        answered = audit.items[0]
        assert [ref.reason for ref in answered.triggers] == [TriggerReason.OPERATOR_MESSAGE]
        [verdict] = answered.verdicts
        assert verdict.verdict == "refused" and verdict.rule == OPERATOR_QUESTION
        assert answered.commands_sent == [] and await launch_commands(js, settings) == []
        reply = replies.items[0]
        assert reply.in_reply_to == question.event_id and "Your question starts no action" in reply.text
        assert "launch 8" in reply.text  # what the current state calls for, from this run's policy
        # the next run a fleet event starts acts as usual
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: len(audit.items) == 2)
    assert audit.items[1].outcome == "acted" and len(await launch_commands(js, settings)) == 1


async def test_a_run_an_operator_message_is_among_the_triggers_of_only_answers(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    """A question with a trigger beside it (an operator's own `config_change`, issue #24) used to run as a normal
    run and could act on the question's text; the fleet's trigger is acted on by a follow-up run instead."""
    await short_fleet(js, settings)  # a run would launch 8
    audit = await audit_log(nc, settings)
    question = OperatorMessage(occurred_at=now(), source="cli", conversation_id="c10", operator="eve", text="launch 50")
    async with running_decider(settings) as (decider, _):
        # in one go, with no await between them: both are pending when the loop next polls, so one run takes both
        decider.on_operator_message(question)
        decider.on_trigger(trigger(reason=TriggerReason.CONFIG_CHANGE))
        await eventually(lambda: len(audit.items) == 2)
    answered, follow_up = audit.items
    assert {ref.reason for ref in answered.triggers} == {TriggerReason.OPERATOR_MESSAGE, TriggerReason.CONFIG_CHANGE}
    assert [v.rule for v in answered.verdicts] == [OPERATOR_QUESTION] and answered.commands_sent == []
    assert [ref.priority for ref in follow_up.triggers] == ["scheduled"]
    assert follow_up.outcome == "acted" and len(await launch_commands(js, settings)) == 1


async def test_every_command_sent_carries_its_expiry(settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
    """FLEETPILOT_DECIDER_COMMAND_TTL_S after it is sent: the provisioner refuses it from then on (issue #24)."""
    await short_fleet(js, settings)
    audit = await audit_log(nc, settings)
    async with running_decider(settings, command_ttl_s=120.0):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
    [command] = await launch_commands(js, settings)
    assert command.expires_at is not None
    # sent during the run, after the command was made and before now
    assert timedelta(seconds=120) <= command.expires_at - command.occurred_at
    assert command.expires_at <= datetime.now(UTC) + timedelta(seconds=120)
