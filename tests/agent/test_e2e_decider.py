"""End to end: the decider's real run loop with the agent as its advisor, the Ollama stand-in over HTTP, real
NATS and Redis. An operator question gets an answer citing the numbers; runs never overlap, even across two
replicas with heartbeat, P0 and P1 firing together; a deleted session does not break the next run."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from redis.asyncio import Redis

from services.cli.ask import ask_and_wait
from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from services.decider.agent.agent import OllamaAgent
from services.decider.agent.config import AgentConfig
from services.decider.agent.store import RedisAgentStore
from services.decider.app import wire
from services.decider.config import DeciderSettings
from services.decider.runner import Decider
from shared.bus import event_headers
from shared.clock import SimulatedClock
from shared.contract import DecisionRecord, Event, LaunchInstances, OperatorMessage, Trigger, TriggerReason
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import LATEST, TRIGGERS
from sim.ollama.server import OllamaStandIn
from tests.agent.builders import signal, small_fleet
from tests.helpers import eventually


@dataclass
class OverlapRecorder:
    """Wall-clock intervals of every advisor run, across every replica in this process."""

    active: int = 0
    max_active: int = 0
    intervals: list[tuple[float, float]] = field(default_factory=list)

    @property
    def overlapping_pairs(self) -> int:
        ordered = sorted(self.intervals)
        return sum(1 for i, (_, end) in enumerate(ordered) for start, _ in ordered[i + 1 :] if start < end)


@dataclass
class RecordedAdvisor:
    agent: OllamaAgent
    recorder: OverlapRecorder

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        self.recorder.active += 1
        self.recorder.max_active = max(self.recorder.max_active, self.recorder.active)
        started = time.monotonic()
        try:
            return await self.agent.advise(inputs, ports)
        finally:
            self.recorder.active -= 1
            self.recorder.intervals.append((started, time.monotonic()))


@dataclass
class Replica:
    ctx: ServiceContext
    decider: Decider
    agent: OllamaAgent
    redis: Redis


class Stack:
    def __init__(self, settings: Settings, clock: SimulatedClock, js: JetStreamContext, ollama: OllamaStandIn) -> None:
        self.settings = settings.model_copy(update={"ollama_host": ollama.url})
        self.clock = clock
        self.js = js
        self.recorder = OverlapRecorder()
        self.replicas: list[Replica] = []
        self.apps: list[object] = []

    async def start_replica(self, replica_id: str) -> Replica:
        ctx = ServiceContext("decider", self.settings, self.clock)
        redis = Redis.from_url(self.settings.redis_url)
        agent = OllamaAgent(
            settings=self.settings,
            clock=self.clock,
            store=RedisAgentStore(redis, self.settings.subject_prefix),
            registry=ctx.metrics.registry,
            config=AgentConfig(call_timeout_s=20),
        )
        config = DeciderSettings(
            replica_id=replica_id,
            run_at_start=False,
            snapshot_request_timeout_s=0.5,
            p1_quiet_s=2,
            p1_max_delay_s=5,
            heartbeat_s=60,
            max_runs_per_h=1000,
            max_p0_runs_per_h=1000,
            lock_retry_s=1,
        )
        app, decider = wire(ctx, RecordedAdvisor(agent, self.recorder), config=config)
        await app.start()
        self.apps.append(app)
        replica = Replica(ctx, decider, agent, redis)
        self.replicas.append(replica)
        return replica

    async def publish(self, subject: str, event: Event, stream: str) -> None:
        await self.js.publish(subject, event.model_dump_json().encode(), stream=stream, headers=event_headers(event))

    async def publish_inputs(self) -> None:
        """Fresh demand signal and fleet snapshot, as demand and fleet keep them in the LATEST stream."""
        now = self.clock.now()
        subjects, latest = self.settings.subjects, LATEST.name(self.settings.subjects)
        await self.publish(subjects.demand_signal, signal().model_copy(update={"occurred_at": now}), latest)
        await self.publish(
            subjects.fleet_snapshot_published, small_fleet().model_copy(update={"occurred_at": now}), latest
        )

    async def trigger(self, priority: str, reason: TriggerReason) -> None:
        event = Trigger(occurred_at=self.clock.now(), source="fleet", priority=priority, reason=reason)  # type: ignore[arg-type]
        await self.publish(
            self.settings.subjects.trigger(event.priority, reason), event, TRIGGERS.name(self.settings.subjects)
        )

    async def close(self) -> None:
        for app in self.apps:
            await app.stop()  # type: ignore[attr-defined]
        for replica in self.replicas:
            await replica.agent.aclose()
            await replica.redis.aclose()


@pytest.fixture
async def stack(
    settings: Settings, sim_clock: SimulatedClock, js: JetStreamContext, ollama: OllamaStandIn
) -> AsyncIterator[Stack]:
    stack = Stack(settings, sim_clock, js, ollama)
    yield stack
    await stack.close()


async def collect(nc: NatsClient, subject: str, into: list[Msg]) -> None:
    async def on_message(msg: Msg) -> None:
        into.append(msg)

    await nc.subscribe(subject, cb=on_message)


def operator_message(stack: Stack, text: str, conversation_id: str) -> OperatorMessage:
    return OperatorMessage(
        occurred_at=stack.clock.now(), source="cli", conversation_id=conversation_id, operator="alice", text=text
    )


async def test_an_operator_question_is_answered_by_the_agent_with_the_numbers(stack: Stack, nc: NatsClient) -> None:
    await stack.start_replica("r1")
    await stack.publish_inputs()
    audit: list[Msg] = []
    commands: list[Msg] = []
    await collect(nc, stack.settings.subjects.decision_audit, audit)
    await collect(nc, stack.settings.subjects.provision_command("launch"), commands)

    message = operator_message(stack, "why did you launch two machines?", "conv-e2e")
    reply = await ask_and_wait(stack.settings, message, timeout_s=30)

    assert reply is not None and reply.in_reply_to == message.event_id
    assert "You asked: 'why did you launch two machines?'" in reply.text
    assert "340 tasks pending" in reply.text and "spend $0.93/h" in reply.text
    await eventually(lambda: audit and commands)
    record = DecisionRecord.model_validate_json(audit[-1].data)
    assert record.agent is not None and record.agent.status == "ok"
    assert record.agent.decision.startswith("followed the policy")
    assert record.agent.observation.startswith("DEMAND: under_provisioned")
    launch = LaunchInstances.model_validate_json(commands[-1].data)
    assert launch.requested_by == "agent" and launch.idempotency_key in record.commands_sent


async def test_the_fleetpilot_ask_command_prints_the_reply(stack: Stack) -> None:
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
    stack: Stack, ollama: OllamaStandIn, sim_clock: SimulatedClock
) -> None:
    await ollama.set_behaviour("slow", slow_s=0.2)  # each model call takes a while: room to overlap
    replicas = [await stack.start_replica("r1"), await stack.start_replica("r2")]
    rounds = 4
    for n in range(rounds):
        await stack.publish_inputs()
        before = len(stack.recorder.intervals)
        await stack.trigger("p0", TriggerReason.INSTANCE_FAILED)
        await stack.trigger("p1", TriggerReason.INSTANCE_TRANSITION)
        await stack.publish(
            stack.settings.subjects.operator_message,
            operator_message(stack, f"status? ({n})", f"conv-{n}"),
            "FPT_OPERATOR",
        )
        await sim_clock.advance_and_settle(61, step_s=1)  # the heartbeat and the P1 quiet period both pass
        await eventually(lambda before=before: len(stack.recorder.intervals) > before, timeout_s=20)
        for _ in range(10):  # let retries after a busy lock come round
            await sim_clock.advance_and_settle(1)
            await asyncio.sleep(0.05)
        await eventually(lambda: stack.recorder.active == 0 and not any(r.decider.scheduler.running for r in replicas))

    assert len(stack.recorder.intervals) >= rounds
    assert stack.recorder.max_active == 1
    assert stack.recorder.overlapping_pairs == 0
    for replica in replicas:
        overlaps = replica.ctx.metrics.registry.get_sample_value("fleetpilot_agent_overlapping_runs_total")
        assert overlaps == 0
    assert max(r["prompt_tokens"] for r in await ollama.received()) <= AgentConfig().token_budget  # type: ignore[operator]


async def test_deleting_the_session_in_redis_mid_life_does_not_break_the_next_run(
    stack: Stack, nc: NatsClient, redis_client: Redis
) -> None:
    replica = await stack.start_replica("r1")
    await stack.publish_inputs()
    audit: list[Msg] = []
    await collect(nc, stack.settings.subjects.decision_audit, audit)
    first = await ask_and_wait(stack.settings, operator_message(stack, "first question", "c1"), timeout_s=30)
    assert first is not None

    store = RedisAgentStore(redis_client, stack.settings.subject_prefix)
    assert await redis_client.delete(store.key("session")) == 1

    second = await ask_and_wait(stack.settings, operator_message(stack, "second question", "c2"), timeout_s=30)

    assert second is not None and "You asked: 'second question'" in second.text
    await eventually(lambda: len(audit) >= 2)
    record = DecisionRecord.model_validate_json(audit[-1].data)
    assert record.agent is not None and record.agent.status == "ok"
    rebuilds = replica.ctx.metrics.registry.get_sample_value("fleetpilot_agent_session_rebuilds_total")
    assert rebuilds == 1
    assert (await store.load()).problems == []
