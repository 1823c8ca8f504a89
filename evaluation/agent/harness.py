"""The agent inside the real decider, on private servers: for end-to-end tests and the soak benchmark.

`AgentStack` starts decider replicas (the decider's own wiring, run loop and Redis lock) with the agent as their
advisor, wrapped so every advisor run's wall-clock interval is recorded: two intervals that intersect are two
runs at once, whichever replica ran them.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from faststream.asgi import AsgiFastStream
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from redis.asyncio import Redis

from evaluation.agent import situation
from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from services.decider.agent.agent import OllamaAgent
from services.decider.agent.config import AgentConfig
from services.decider.agent.store import RedisAgentStore
from services.decider.app import wire
from services.decider.config import DeciderSettings
from services.decider.runner import Decider
from shared.bus import event_headers
from shared.clock import Clock
from shared.contract import (
    DemandSignal,
    Event,
    FleetSnapshot,
    OperatorMessage,
    Trigger,
    TriggerPriority,
    TriggerReason,
)
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import LATEST, OPERATOR, TRIGGERS

CLOSE_STEP_TIMEOUT_S = 30.0
log = logging.getLogger("fleetpilot.sim.ollama")


@dataclass
class OverlapRecorder:
    """Wall-clock intervals of every advisor run in this process."""

    active: int = 0
    max_active: int = 0
    intervals: list[tuple[float, float]] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)  # the agent's own (conservative) count, per run
    statuses: list[str] = field(default_factory=list)

    @property
    def overlapping_pairs(self) -> int:
        ordered = sorted(self.intervals)
        pairs = 0
        for index, (_, end) in enumerate(ordered):
            for start, _ in ordered[index + 1 :]:
                if start >= end:
                    break  # sorted by start: none later can overlap this one
                pairs += 1
        return pairs


@dataclass
class RecordedAdvisor:
    agent: OllamaAgent
    recorder: OverlapRecorder

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        self.recorder.active += 1
        self.recorder.max_active = max(self.recorder.max_active, self.recorder.active)
        started = time.monotonic()
        try:
            outcome = await self.agent.advise(inputs, ports)
            self.recorder.prompt_tokens.append(outcome.trace.prompt_tokens)
            self.recorder.statuses.append(outcome.trace.status)
            return outcome
        finally:
            self.recorder.active -= 1
            self.recorder.intervals.append((started, time.monotonic()))


@dataclass
class Replica:
    ctx: ServiceContext
    app: AsgiFastStream
    decider: Decider
    agent: OllamaAgent
    redis: Redis

    def sample(self, name: str, **labels: str) -> float:
        return self.ctx.metrics.registry.get_sample_value(name, labels) or 0.0


class AgentStack:
    """Decider replicas with the agent, talking to the Ollama at `ollama_url` through `settings`' NATS and Redis."""

    def __init__(self, settings: Settings, clock: Clock, js: JetStreamContext, ollama_url: str) -> None:
        self.settings = settings.model_copy(update={"ollama_host": ollama_url})
        self.clock = clock
        self.js = js
        self.recorder = OverlapRecorder()
        self.replicas: list[Replica] = []

    async def start_replica(self, replica_id: str, agent_config: AgentConfig | None = None, **decider: Any) -> Replica:
        ctx = ServiceContext("decider", self.settings, self.clock)
        redis = Redis.from_url(self.settings.redis_url)
        agent = OllamaAgent(
            settings=self.settings,
            clock=self.clock,
            store=RedisAgentStore(redis, self.settings.subject_prefix),
            registry=ctx.metrics.registry,
            config=agent_config or AgentConfig(call_timeout_s=20),
        )
        options: dict[str, Any] = {
            "run_at_start": False,
            "snapshot_request_timeout_s": 0.5,
            "max_runs_per_h": 100_000,
            "max_p0_runs_per_h": 100_000,
            **decider,
        }
        app, run_loop = wire(
            ctx, RecordedAdvisor(agent, self.recorder), config=DeciderSettings(replica_id=replica_id, **options)
        )
        await app.start()
        replica = Replica(ctx, app, run_loop, agent, redis)
        self.replicas.append(replica)
        return replica

    async def publish(self, subject: str, event: Event, stream: str) -> None:
        await self.js.publish(subject, event.model_dump_json().encode(), stream=stream, headers=event_headers(event))

    async def publish_inputs(self, signal: DemandSignal | None = None, snapshot: FleetSnapshot | None = None) -> None:
        """A fresh demand signal and fleet snapshot, as demand and fleet keep them in the LATEST stream."""
        now = self.clock.now()
        subjects, latest = self.settings.subjects, LATEST.name(self.settings.subjects)
        signal = (signal or situation.demand_signal(now)).model_copy(update={"occurred_at": now})
        snapshot = (snapshot or situation.small_fleet(now)).model_copy(update={"occurred_at": now})
        await self.publish(subjects.demand_signal, signal, latest)
        await self.publish(subjects.fleet_snapshot_published, snapshot, latest)

    async def trigger(self, priority: TriggerPriority, reason: TriggerReason) -> None:
        event = Trigger(occurred_at=self.clock.now(), source="fleet", priority=priority, reason=reason)
        await self.publish(
            self.settings.subjects.trigger(priority, reason), event, TRIGGERS.name(self.settings.subjects)
        )

    def operator_message(self, text: str, conversation_id: str) -> OperatorMessage:
        return OperatorMessage(
            occurred_at=self.clock.now(), source="cli", conversation_id=conversation_id, operator="alice", text=text
        )

    async def send_operator_message(self, message: OperatorMessage) -> None:
        subjects = self.settings.subjects
        await self.publish(subjects.operator_message, message, OPERATOR.name(subjects))

    async def close(self) -> None:
        """Bounded: a shutdown step that hangs is reported with every pending task's stack, then left behind."""
        for replica in self.replicas:
            for name, step in (
                ("decider app", replica.app.stop()),
                ("agent", replica.agent.aclose()),
                ("redis client", replica.redis.aclose()),
            ):
                try:
                    await asyncio.wait_for(step, CLOSE_STEP_TIMEOUT_S)
                except TimeoutError:
                    replica_id = replica.decider.config.replica_id
                    log.error("closing the %s of replica %s took over %.0f s", name, replica_id, CLOSE_STEP_TIMEOUT_S)
                    dump_tasks()


def dump_tasks() -> None:
    for task in asyncio.all_tasks():
        stack = io.StringIO()
        task.print_stack(limit=12, file=stack)
        log.error("pending task %s:\n%s", task.get_name(), stack.getvalue())


async def answer_offer_queries(nc: NatsClient, settings: Settings, clock: Clock, offers: int, note: str = "") -> None:
    """Stands in for the provisioner's offer look-up: `offers` ranked lines per query, long ones if `note` is."""

    async def respond(msg: Msg) -> None:
        await msg.respond(situation.offer_list(clock.now(), offers, note).model_dump_json().encode())

    await nc.subscribe(settings.subjects.provision_offers, cb=respond)
