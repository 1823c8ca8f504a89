"""Running the decider in-process on the test's real nats-server and redis-server, and reading what it publishes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from pydantic import BaseModel

from services.decider.advisor import Advisor
from services.decider.app import wire
from services.decider.config import DeciderSettings
from services.decider.runner import Decider
from shared.bus import event_headers
from shared.clock import Clock, RealClock
from shared.contract import DecisionRecord, DemandSignal, Event, FleetSnapshot, Trigger
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import COMMANDS, LATEST, TRIGGERS

CommandModel = TypeVar("CommandModel", bound=BaseModel)

FAST = {
    "run_at_start": False,
    "heartbeat_s": 3600.0,
    "p1_quiet_s": 0.2,
    "p1_max_delay_s": 1.0,
    "lock_ttl_s": 2.0,
    "lock_retry_s": 0.05,
    "redis_retry_s": 0.2,
    "snapshot_request_timeout_s": 0.2,
}


class Collector:
    """Every message on a subject, parsed with its contract model."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model
        self.items: list[Any] = []

    async def __call__(self, msg: Any) -> None:
        self.items.append(self.model.model_validate_json(msg.data))


async def collect(nc: NatsClient, subject: str, model: type[BaseModel]) -> Collector:
    collector = Collector(model)

    async def on_message(msg: Any) -> None:  # nats-py wants a coroutine function, not a callable object
        await collector(msg)

    await nc.subscribe(subject, cb=on_message)
    return collector


async def audit_log(nc: NatsClient, settings: Settings) -> Collector:
    return await collect(nc, settings.subjects.decision_audit, DecisionRecord)


async def publish(js: JetStreamContext, subject: str, event: Event, stream: str) -> None:
    await js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)


async def publish_inputs(
    js: JetStreamContext, settings: Settings, signal: DemandSignal, snapshot: FleetSnapshot
) -> None:
    """As demand and fleet do: the last value of each kept in LATEST."""
    stream = LATEST.name(settings.subjects)
    await publish(js, settings.subjects.demand_signal, signal, stream)
    await publish(js, settings.subjects.fleet_snapshot_published, snapshot, stream)


async def publish_trigger(js: JetStreamContext, settings: Settings, trigger: Trigger) -> None:
    subject = settings.subjects.trigger(trigger.priority, trigger.reason)
    await publish(js, subject, trigger, TRIGGERS.name(settings.subjects))


@contextlib.asynccontextmanager
async def running_decider(
    settings: Settings, advisor: Advisor | None = None, clock: Clock | None = None, **overrides: Any
) -> AsyncIterator[tuple[Decider, ServiceContext]]:
    ctx = ServiceContext("decider", settings, clock or RealClock())
    app, decider = wire(ctx, advisor, config=DeciderSettings(**{**FAST, **overrides}))
    await app.start()
    try:
        yield decider, ctx
    finally:
        await app.stop()


async def queued_commands(
    js: JetStreamContext, settings: Settings, verb: str, model: type[CommandModel]
) -> list[CommandModel]:
    """The commands of one verb waiting in the work queue (nothing consumes them in these tests), oldest first."""
    name = COMMANDS.name(settings.subjects)
    info = await js.stream_info(name)
    found: list[CommandModel] = []
    if info.state.messages == 0:
        return found
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await js.get_msg(name, seq)
        if raw.subject == settings.subjects.provision_command(verb):
            found.append(model.model_validate_json(raw.data or b""))
    return found


def sample(ctx: ServiceContext, name: str, **labels: str) -> float:
    return ctx.metrics.registry.get_sample_value(name, labels) or 0.0
