"""A stop or destroy is sent once: never ordered again while the first waits in the command queue.

The ghost machines of a demo on a busy machine: the provisioner fell behind, fleet still showed the failed
machines, and every decider run ordered their destroys again (one 66 times); the command queue filled with
duplicates and the real destroys waited hours behind them while the machines billed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from services.decider.guardrails import (
    REMOVAL_IN_FLIGHT_S,
    GuardrailConfig,
    GuardrailRule,
    SentRemoval,
    check,
    ledger_from,
    removals_in_flight,
)
from shared.contract import (
    AgentTrace,
    DestroyInstance,
    FailureReason,
    GuardrailVerdict,
    InstanceState,
    RemovalReason,
    TriggerReason,
)
from shared.settings import Settings
from tests.decider.factories import line, producing, signal, snapshot
from tests.decider.harness import audit_log, publish_inputs, publish_trigger, queued_commands, running_decider
from tests.decider.test_decider_app import trigger
from tests.helpers import eventually

CONFIG = GuardrailConfig(
    budget_usd_per_h=20.0, max_instances=40, normal_max_price_usd_per_h=1.0, emergency_max_price_usd_per_h=2.0
)
FAILED_ID = 300


def now() -> datetime:
    return datetime.now(UTC)


def failed_line(at: datetime, instance_id: int = FAILED_ID, failed_for_s: float = 600.0):  # type: ignore[no-untyped-def]
    return line(
        instance_id, InstanceState.FAILED, at, state_for_s=failed_for_s, last_task_ago_s=None,
        failure_reason=FailureReason.DEAD,
    )  # fmt: skip


async def publish_fleet(js: JetStreamContext, settings: Settings, *, failed: list[int], failed_for_s: float) -> None:
    t = now()
    lines = [*producing(2, t), *(failed_line(t, i, failed_for_s) for i in failed)]
    await publish_inputs(js, settings, signal(t, pending=2, rate_per_h=200, producing_workers=2), snapshot(t, lines))


class DestroyingAgent:
    """The agent shown a failed machine destroys it, whatever the policy recommends."""

    def __init__(self) -> None:
        self.verdicts: list[GuardrailVerdict] = []

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        action = DestroyInstance(
            occurred_at=inputs.now, source="decider", idempotency_key=f"{inputs.run_id}-agent", requested_by="agent",
            instance_id=FAILED_ID, reason=RemovalReason.FAILED,
        )  # fmt: skip
        self.verdicts.append(await ports.act(action))
        return AdvisorOutcome(trace=AgentTrace(decision="scripted", status="ok"), status="ok")


async def destroys(js: JetStreamContext, settings: Settings) -> list[DestroyInstance]:
    """Nothing consumes the queue here, as with a provisioner that fell behind."""
    return await queued_commands(js, settings, "destroy", DestroyInstance)


async def test_a_destroy_waiting_in_the_queue_is_not_ordered_again_by_later_runs_or_the_agent(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await publish_fleet(js, settings, failed=[FAILED_ID], failed_for_s=600.0)
    audit = await audit_log(nc, settings)
    async with running_decider(settings):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        assert [c.instance_id for c in await destroys(js, settings)] == [FAILED_ID]
        # the provisioner is behind: fleet still shows the machine failed, re-published later (a delayed snapshot),
        # and more triggers wake more runs
        for _ in range(3):
            await publish_fleet(js, settings, failed=[FAILED_ID], failed_for_s=600.0)
            await publish_trigger(js, settings, trigger("p0", TriggerReason.INSTANCE_DEAD))
            await eventually(lambda n=len(audit.items): len(audit.items) > n)
        assert [c.instance_id for c in await destroys(js, settings)] == [FAILED_ID]
        assert "awaiting removals already sent: #300 (destroy sent" in audit.items[-1].recommendation
    # the agent, shown the same fleet, asks again: refused by the guardrails, with the first command named
    advisor = DestroyingAgent()
    async with running_decider(settings, advisor):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: advisor.verdicts)
    refused = advisor.verdicts[0]
    assert refused.verdict == "refused" and refused.rule == GuardrailRule.REMOVAL_IN_FLIGHT.value
    assert "was sent at" in refused.explanation
    assert [c.instance_id for c in await destroys(js, settings)] == [FAILED_ID]


async def test_a_machine_that_failed_again_after_the_send_or_another_failed_machine_is_ordered_at_once(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    await publish_fleet(js, settings, failed=[FAILED_ID], failed_for_s=600.0)
    audit = await audit_log(nc, settings)
    async with running_decider(settings):
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: audit.items)
        # a second machine failed meanwhile; the first is still awaited
        await publish_fleet(js, settings, failed=[FAILED_ID, 301], failed_for_s=600.0)
        await publish_trigger(js, settings, trigger())
        await eventually(lambda: len(audit.items) == 2)
    assert [c.instance_id for c in await destroys(js, settings)] == [FAILED_ID, 301]


def test_in_flight_until_the_snapshot_shows_a_move_or_the_limit_passes() -> None:
    t = datetime(2026, 3, 2, 12, tzinfo=UTC)
    sent = [SentRemoval("run-1-0", t, FAILED_ID, "destroy")]
    still_failed = snapshot(t, [*producing(2, t), failed_line(t)])
    assert set(removals_in_flight(sent, still_failed, t + timedelta(minutes=5))) == {FAILED_ID}
    # the limit passed without a move: the first command is taken as lost, a new one may go
    late = t + timedelta(seconds=REMOVAL_IN_FLIGHT_S)
    assert removals_in_flight(sent, still_failed, late) == {}
    # gone from the snapshot, or in a state entered after the send: carried out
    assert removals_in_flight(sent, snapshot(t, producing(2, t)), t) == {}
    moved = snapshot(t, [failed_line(t + timedelta(minutes=2), failed_for_s=0.0)])
    assert removals_in_flight(sent, moved, t + timedelta(minutes=3)) == {}


def test_the_guardrail_refuses_a_second_stop_or_destroy_but_not_another_machine() -> None:
    t = datetime(2026, 3, 2, 12, tzinfo=UTC)
    fleet = snapshot(t, [*producing(2, t), failed_line(t), failed_line(t, 301)])
    demand = signal(t, pending=2, rate_per_h=200, producing_workers=2)
    sent = [SentRemoval("run-1-0", t - timedelta(minutes=1), FAILED_ID, "destroy")]
    ledger = ledger_from(fleet, demand, [], t, stale=False, removals=sent)

    def destroy(instance_id: int) -> DestroyInstance:
        return DestroyInstance(
            occurred_at=t, source="decider", idempotency_key=f"run-2-{instance_id}", requested_by="agent",
            instance_id=instance_id, reason=RemovalReason.FAILED,
        )  # fmt: skip

    verdict, _ = check(destroy(FAILED_ID), ledger, t, CONFIG)
    assert verdict.verdict == "refused" and verdict.rule == GuardrailRule.REMOVAL_IN_FLIGHT.value
    verdict, _ = check(destroy(301), ledger, t, CONFIG)
    assert verdict.verdict == "allowed"
    without = replace(ledger, removals_in_flight={})
    assert check(destroy(FAILED_ID), without, t, CONFIG)[0].verdict == "allowed"
