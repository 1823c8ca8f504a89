"""End to end: the decider's real run loop with the agent as its advisor, the Ollama stand-in over HTTP, real
NATS and Redis. An operator question gets an answer citing the numbers; runs never overlap, even across two
replicas with heartbeat, P0 and P1 firing together; a deleted session does not break the next run."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from redis.asyncio import Redis

from evaluation.agent.harness import AgentStack
from services.cli.ask import ask_and_wait
from services.decider.agent.agent import OllamaAgent
from services.decider.agent.config import AgentConfig
from services.decider.agent.store import RedisAgentStore
from services.decider.app import load_advisor
from services.decider.step import OPERATOR_QUESTION
from shared.clock import SimulatedClock
from shared.contract import DecisionRecord, LaunchInstances, TriggerReason
from shared.service import ServiceContext
from shared.settings import Settings
from sim.ollama.server import OllamaStandIn
from tests.helpers import eventually


@pytest.fixture
async def stack(
    settings: Settings, sim_clock: SimulatedClock, js: JetStreamContext, ollama: OllamaStandIn
) -> AsyncIterator[AgentStack]:
    stack = AgentStack(settings, sim_clock, js, ollama.url)
    yield stack
    await stack.close()


async def collect(nc: NatsClient, subject: str, into: list[Msg]) -> None:
    async def on_message(msg: Msg) -> None:
        into.append(msg)

    await nc.subscribe(subject, cb=on_message)


async def test_an_operator_question_is_answered_by_the_agent_with_the_numbers(
    stack: AgentStack, nc: NatsClient
) -> None:
    await stack.start_replica("r1")
    await stack.publish_inputs()
    audit: list[Msg] = []
    commands: list[Msg] = []
    await collect(nc, stack.settings.subjects.decision_audit, audit)
    await collect(nc, stack.settings.subjects.provision_command("launch"), commands)

    message = stack.operator_message("why did you launch two machines?", "conv-e2e")
    reply = await ask_and_wait(stack.settings, message, timeout_s=30)

    assert reply is not None and reply.in_reply_to == message.event_id
    assert "You asked: 'why did you launch two machines?'" in reply.text
    assert "340 tasks pending" in reply.text and "spend $0.93/h" in reply.text
    await eventually(lambda: audit)
    record = DecisionRecord.model_validate_json(audit[-1].data)
    assert record.agent is not None and record.agent.status == "ok"
    assert record.agent.decision.startswith("followed the policy")
    assert record.agent.observation.startswith("DEMAND: under_provisioned")
    # a question starts no action: the launch the agent tried was refused, nothing went to the provisioner
    [verdict] = record.verdicts
    assert isinstance(verdict.action, LaunchInstances) and verdict.action.requested_by == "agent"
    assert verdict.verdict == "refused" and verdict.rule == OPERATOR_QUESTION
    assert record.commands_sent == [] and commands == []


async def test_an_operator_instruction_is_stored_as_a_directive_by_the_agent_through_the_deciders_desk(
    stack: AgentStack, ollama: OllamaStandIn, sim_clock: SimulatedClock
) -> None:
    """The run an operator's message starts is answer-only (no fleet action), yet its instruction is stored: the
    agent reads it as a limit (the stand-in answers the structured reading), the decider's desk stores it with its
    checks, and the reply carries the desk's answer."""
    await ollama.set_behaviour("follow")  # its tool calls set no limit: the reading alone stores it
    replica = await stack.start_replica("r1")
    await stack.publish_inputs()

    message = stack.operator_message("keep at most 3 machines until 23:30", "conv-direct")
    reply = await ask_and_wait(stack.settings, message, timeout_s=30)

    assert reply is not None and reply.in_reply_to == message.event_id
    assert "directive #1 stored" in reply.text
    stored = await replica.decider.directive_desk.store.read(sim_clock.now())
    [directive] = stored.directives
    assert directive.kind.value == "cap_instances" and directive.max_instances == 3  # type: ignore[union-attr]
    assert directive.set_by == "alice"
    # a loosening one is refused by the same desk, and the operator is told why
    refused = stack.operator_message("allow at most 1000 machines until 23:30", "conv-direct-2")
    reply = await ask_and_wait(stack.settings, refused, timeout_s=30)
    # (the stand-in's own words quote 1000 back and the 40 of its fleet line: the refusal is said anyway)
    assert reply is not None and "not done: the limit of 40 machines" in reply.text
    assert len((await replica.decider.directive_desk.store.read(sim_clock.now())).directives) == 1


async def test_a_message_the_model_cannot_read_leaves_the_limit_tools_offered_and_the_call_stores_it(
    stack: AgentStack, ollama: OllamaStandIn, sim_clock: SimulatedClock
) -> None:
    """The fallback: the model answers the structured reading in prose, so the run keeps the limit tools, and its
    cap_instances call goes through the same desk."""
    await ollama.set_behaviour("direct")
    replica = await stack.start_replica("r1")
    await stack.publish_inputs()

    message = stack.operator_message("keep at most 3 machines until 23:30", "conv-tools")
    reply = await ask_and_wait(stack.settings, message, timeout_s=30)

    assert reply is not None and "directive #1 stored" in reply.text
    [directive] = (await replica.decider.directive_desk.store.read(sim_clock.now())).directives
    assert directive.kind.value == "cap_instances" and directive.max_instances == 3  # type: ignore[union-attr]
    assert len(await ollama.readings()) == 1  # the reading was asked, and failed
    assert "cap_instances" in (await ollama.received())[-1]["tools"]


async def test_the_fleetpilot_ask_command_prints_the_reply(stack: AgentStack) -> None:
    await stack.start_replica("r1")
    await stack.publish_inputs()
    env = {
        **os.environ,
        "FLEETPILOT_NATS_URL": stack.settings.nats_url,
        "FLEETPILOT_SUBJECT_PREFIX": stack.settings.subject_prefix,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "ask", "what is the spend?", "--timeout", "30",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await process.communicate()

    assert process.returncode == 0, stderr.decode()
    assert "You asked: 'what is the spend?'" in stdout.decode()
    assert "spend $0.93/h" in stdout.decode() and "(conversation cli-" in stderr.decode()


async def test_no_two_runs_overlap_when_heartbeat_p0_and_p1_fire_together(
    stack: AgentStack, ollama: OllamaStandIn, sim_clock: SimulatedClock
) -> None:
    await ollama.set_behaviour("slow", slow_s=0.2)  # each model call takes a while: room to overlap
    quick = {"p1_quiet_s": 2, "p1_max_delay_s": 5, "heartbeat_s": 60, "lock_retry_s": 1}
    replicas = [await stack.start_replica("r1", **quick), await stack.start_replica("r2", **quick)]
    rounds = 4
    for n in range(rounds):
        await stack.publish_inputs()
        before = len(stack.recorder.intervals)
        await stack.trigger("p0", TriggerReason.INSTANCE_FAILED)
        await stack.trigger("p1", TriggerReason.INSTANCE_TRANSITION)
        await stack.send_operator_message(stack.operator_message(f"status? ({n})", f"conv-{n}"))
        await sim_clock.advance_and_settle(61, step_s=1)  # the heartbeat and the P1 quiet period both pass
        await eventually(lambda before=before: len(stack.recorder.intervals) > before, timeout_s=20)
        for _ in range(10):  # let retries after a busy lock come round
            await sim_clock.advance_and_settle(1)
            await asyncio.sleep(0.05)
        await eventually(lambda: stack.recorder.active == 0 and not any(r.decider.scheduler.running for r in replicas))

    assert len(stack.recorder.intervals) >= rounds
    assert stack.recorder.max_active == 1
    assert stack.recorder.overlapping_pairs == 0
    assert all(replica.sample("fleetpilot_agent_overlapping_runs_total") == 0 for replica in replicas)
    assert max(r["prompt_tokens"] for r in await ollama.received()) <= AgentConfig().token_budget  # type: ignore[operator]


async def test_deleting_the_session_in_redis_mid_life_does_not_break_the_next_run(
    stack: AgentStack, nc: NatsClient, redis_client: Redis
) -> None:
    replica = await stack.start_replica("r1")
    await stack.publish_inputs()
    audit: list[Msg] = []
    await collect(nc, stack.settings.subjects.decision_audit, audit)
    first = await ask_and_wait(stack.settings, stack.operator_message("first question", "c1"), timeout_s=30)
    assert first is not None

    store = RedisAgentStore(redis_client, stack.settings.subject_prefix)
    assert await redis_client.delete(store.key("session")) == 1

    second = await ask_and_wait(stack.settings, stack.operator_message("second question", "c2"), timeout_s=30)

    assert second is not None and "You asked: 'second question'" in second.text
    await eventually(lambda: len(audit) >= 2)
    record = DecisionRecord.model_validate_json(audit[-1].data)
    assert record.agent is not None and record.agent.status == "ok"
    assert replica.sample("fleetpilot_agent_session_rebuilds_total") == 1
    assert (await store.load()).problems == []


async def test_the_decider_loads_the_agent_from_its_advisor_setting(settings: Settings) -> None:
    ctx = ServiceContext("decider", settings, SimulatedClock())
    advisor = load_advisor("services.decider.agent.agent:create_agent", ctx)
    assert isinstance(advisor, OllamaAgent)
    try:
        assert ctx.metrics.registry.get_sample_value("fleetpilot_agent_degraded") == 0
        assert isinstance(advisor.store, RedisAgentStore) and advisor.store.base == "fleetpilot:fpt:agent"
    finally:
        await advisor.aclose()
