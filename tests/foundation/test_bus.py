"""The real bus: events reach the demand service, bad ones go to the dead-letter subject, nothing acked is lost."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from services.demand.app import build
from shared.bus import event_headers, is_inbox
from shared.contract import DeadLetter, TaskEvent
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import DEMAND, DLQ
from sim.infra import NatsServer
from tests.helpers import eventually

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def task_event(task_id: str, kind: str = "submitted") -> TaskEvent:
    return TaskEvent(occurred_at=NOW, source="jobs", kind=kind, task_id=task_id)  # type: ignore[arg-type]


def counted(ctx: ServiceContext, kind: str) -> float:
    return ctx.metrics.registry.get_sample_value("fleetpilot_demand_task_events_total", {"kind": kind}) or 0.0


def dead_letters(ctx: ServiceContext, reason: str) -> float:
    labels = {"service": "demand", "reason": reason}
    return ctx.metrics.registry.get_sample_value("fleetpilot_dead_letters_total", labels) or 0.0


async def publish(js: JetStreamContext, settings: Settings, event: TaskEvent) -> None:
    await js.publish(
        settings.subjects.task(event.kind),
        event.model_dump_json().encode(),
        headers=event_headers(event),
        stream=DEMAND.name(settings.subjects),
    )


async def test_valid_task_event_reaches_demand_and_is_counted(settings: Settings, js: JetStreamContext) -> None:
    ctx = ServiceContext.from_settings("demand", settings)
    app = build(ctx)
    await app.start()
    try:
        await publish(js, settings, task_event("t1"))
        await publish(js, settings, task_event("t1", "completed"))
        await eventually(lambda: counted(ctx, "submitted") == 1 and counted(ctx, "completed") == 1)
    finally:
        await app.stop()


async def test_malformed_event_is_dead_lettered_and_the_next_is_processed(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    ctx = ServiceContext.from_settings("demand", settings)
    app = build(ctx)
    letters: list[DeadLetter] = []

    async def collect(msg) -> None:  # type: ignore[no-untyped-def]
        letters.append(DeadLetter.model_validate_json(msg.data))

    await nc.subscribe(settings.subjects.dead_letter("demand"), cb=collect)
    await app.start()
    try:
        bad = json.loads(task_event("t-bad").model_dump_json())
        bad["duration_s"] = "four minutes"
        await js.publish(
            settings.subjects.task("completed"),
            json.dumps(bad).encode(),
            stream=DEMAND.name(settings.subjects),
        )
        await js.publish(settings.subjects.task("submitted"), b"{not json", stream=DEMAND.name(settings.subjects))
        await publish(js, settings, task_event("t-good"))

        await eventually(lambda: len(letters) == 2 and counted(ctx, "submitted") == 1)
        assert dead_letters(ctx, "invalid_message") == 2
        by_subject = {letter.original_subject: letter for letter in letters}
        shape = by_subject[settings.subjects.task("completed")]
        assert shape.reason == "invalid_message"
        assert "duration_s" in shape.error and "four minutes" in shape.error
        assert json.loads(shape.payload)["task_id"] == "t-bad"
        assert by_subject[settings.subjects.task("submitted")].payload == "{not json"
        # the dead letters are durable too
        info = await js.stream_info(DLQ.name(settings.subjects))
        assert info.state.messages == 2
    finally:
        await app.stop()


async def test_duplicate_delivery_is_counted_once(settings: Settings, js: JetStreamContext) -> None:
    ctx = ServiceContext.from_settings("demand", settings)
    app = build(ctx)
    await app.start()
    try:
        event = task_event("dup")
        await publish(js, settings, event)
        # same event id published again past the JetStream window (different msg id): the service must dedupe
        await js.publish(
            settings.subjects.task("submitted"),
            event.model_dump_json().encode(),
            stream=DEMAND.name(settings.subjects),
        )
        await publish(js, settings, task_event("other"))
        await eventually(lambda: counted(ctx, "submitted") == 2)
        await asyncio.sleep(0.2)
        assert counted(ctx, "submitted") == 2
        assert ctx.metrics.registry.get_sample_value("fleetpilot_duplicate_events_total", {"service": "demand"}) == 1
    finally:
        await app.stop()


async def test_nats_restart_loses_no_acknowledged_message(
    settings: Settings, nats_server: NatsServer, nc: NatsClient, js: JetStreamContext
) -> None:
    published = []
    for i in range(50):
        event = task_event(f"before-{i}")
        await publish(js, settings, event)  # returns only once JetStream has acknowledged it
        published.append(event.event_id)

    nats_server.kill()
    nats_server.start()

    ctx = ServiceContext.from_settings("demand", settings)
    app = build(ctx)
    await app.start()
    try:
        await eventually(lambda: nc.is_connected, timeout_s=15)
        for i in range(50):
            await publish(js, settings, task_event(f"after-{i}"))
        await eventually(lambda: counted(ctx, "submitted") == 100, timeout_s=20)
    finally:
        await app.stop()


@pytest.mark.parametrize(
    ("subject", "inbox"),
    [
        ("_INBOX.abc.1", True),  # nats-py's default, without a NATS user
        ("_INBOX_decider.abc.1", True),
        ("_INBOX_operator.x", True),
        ("fp.cmd.provision.launch", False),  # the review's confused-deputy reply subjects
        ("fp.demand.signal", False),
        ("_INBOX", False),
        ("_INBOX.", False),
        ("_INBOXES.x", False),
        ("x._INBOX.y", False),
    ],
)
def test_only_an_inbox_is_a_reply_subject(subject: str, inbox: bool) -> None:
    assert is_inbox(subject) is inbox
