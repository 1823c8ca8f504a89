"""`fleetpilot dlq list|show` reads the dead letters a real service parked, and the service's log line names the
fields that were wrong."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from nats.js import JetStreamContext

from services.demand.app import build
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import DEMAND, DLQ
from tests.cli.conftest import RunCli
from tests.foundation.test_bus import task_event
from tests.helpers import eventually


async def test_dead_letters_are_listed_and_shown_with_their_reasons(
    settings: Settings, js: JetStreamContext, run_cli: RunCli, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="fleetpilot.bus")
    app = build(ServiceContext.from_settings("demand", settings))
    await app.start()
    try:
        bad = json.loads(task_event("t-bad").model_dump_json())
        bad["duration_s"] = "four minutes"
        subject, stream = settings.subjects.task("completed"), DEMAND.name(settings.subjects)
        await js.publish(subject, json.dumps(bad).encode(), stream=stream)

        async def parked() -> bool:
            return (await js.stream_info(DLQ.name(settings.subjects))).state.messages == 1

        await eventually(parked)
    finally:
        await app.stop()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dead-lettered message")]
    assert len(logged) == 1 and "duration_s" in logged[0] and "'four minutes'" in logged[0], logged

    env = {"FLEETPILOT_NATS_URL": settings.nats_url, "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix}
    listed = await asyncio.to_thread(run_cli, "dlq", "list", **env)
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    assert line.startswith("#1 ") and " demand " in line and " invalid_message " in line
    assert settings.subjects.task("completed") in line and "duration_s" in line

    shown = await asyncio.to_thread(run_cli, "dlq", "show", "1", **env)
    assert shown.returncode == 0, shown.stderr
    assert "reason:   invalid_message" in shown.stdout and '"t-bad"' in shown.stdout

    missing = await asyncio.to_thread(run_cli, "dlq", "show", "7", **env)
    assert missing.returncode == 1 and "no dead letter #7" in missing.stderr


async def test_a_dead_letter_says_the_field_the_value_and_what_was_expected_and_can_be_replayed_or_purged(
    settings: Settings, js: JetStreamContext, run_cli: RunCli
) -> None:
    ctx = ServiceContext.from_settings("demand", settings)
    app = build(ctx)
    await app.start()
    dlq = DLQ.name(settings.subjects)
    env = {"FLEETPILOT_NATS_URL": settings.nats_url, "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix}
    try:
        bad = json.loads(task_event("t-late").model_dump_json())
        bad["duration_s"] = "four minutes"
        subject, stream = settings.subjects.task("completed"), DEMAND.name(settings.subjects)
        await js.publish(subject, json.dumps(bad).encode(), stream=stream)
        await eventually(lambda: js_messages(js, dlq, 1))
        shown = await asyncio.to_thread(run_cli, "dlq", "show", "1", **env)
        assert "duration_s = 'four minutes': expected a valid number" in shown.stdout, shown.stdout
        assert "errors.pydantic.dev" not in shown.stdout  # a documentation link is no reason

        replayed = await asyncio.to_thread(run_cli, "dlq", "replay", "1", **env)
        assert replayed.returncode == 0 and f"replayed #1 to {subject}" in replayed.stdout, replayed.stderr
        # demand reads the original bytes again, rejects them again: a new dead letter, the old one gone
        await eventually(lambda: js_last_seq(js, dlq, 2))
        assert (await js.stream_info(dlq)).state.messages == 1
    finally:
        await app.stop()

    purged = await asyncio.to_thread(run_cli, "dlq", "purge", "--service", "demand", "--yes", **env)
    assert purged.returncode == 0 and purged.stdout.strip() == "purged 1 dead letter(s) of demand", purged.stderr
    assert (await js.stream_info(dlq)).state.messages == 0
    refused = await asyncio.to_thread(run_cli, "dlq", "purge", **env)
    assert refused.returncode == 2 and "add --yes" in refused.stderr


async def js_messages(js: JetStreamContext, stream: str, count: int) -> bool:
    return (await js.stream_info(stream)).state.messages == count


async def js_last_seq(js: JetStreamContext, stream: str, seq: int) -> bool:
    return (await js.stream_info(stream)).state.last_seq == seq


def test_an_unknown_service_is_an_error(run_cli: RunCli) -> None:
    done = run_cli("dlq", "list", "--service", "nope")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "error: --service 'nope': expected one of bench, decider, demand, fleet, provisioner"
