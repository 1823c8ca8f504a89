"""`fleetpilot directives`: its moments and values parsed, and the commands against a running decider."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.client import Client as NatsClient
from typer.testing import CliRunner

from services.cli.directives import build_directive, parse_when
from services.cli.main import app
from shared.contract.directives import CapBudget, DrainBy, ExcludeGpuModel, ExcludeHost, SetLever
from shared.processes import free_port
from shared.settings import Settings
from tests.decider.harness import running_decider

NOW = datetime(2026, 12, 3, 14, 30, tzinfo=UTC)


def cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    env = {"FLEETPILOT_NATS_URL": settings.nats_url, "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_moments_are_utc_times_of_day_iso_moments_or_durations_from_now() -> None:
    assert parse_when("18:00", NOW) == NOW.replace(hour=18, minute=0)
    assert parse_when("09:15", NOW) == NOW.replace(hour=9, minute=15) + timedelta(days=1)  # past today: tomorrow
    assert parse_when("2026-12-05T17:00", NOW) == datetime(2026, 12, 5, 17, 0, tzinfo=UTC)
    assert parse_when("2026-12-05T17:00+01:00", NOW) == datetime(2026, 12, 5, 16, 0, tzinfo=UTC)
    assert parse_when("4h", NOW) == NOW + timedelta(hours=4)
    assert parse_when("90m", NOW) == NOW + timedelta(minutes=90)
    assert parse_when("2d", NOW) == NOW + timedelta(days=2)
    for wrong in ("tomorrow", "25:00", "4 hours"):
        with pytest.raises(ValueError, match=r"expected|not a time of day"):
            parse_when(wrong, NOW)
    # past the last date there is: one clear line, not an OverflowError's traceback
    for too_far in ("99999999d", "9999999999999999999999h", "9999-12-31T23:59:59-23:59"):
        with pytest.raises(ValueError, match=r"too far|expected"):
            parse_when(too_far, NOW)


def test_each_kind_takes_its_value_in_plain_words() -> None:
    until = NOW + timedelta(hours=4)
    model = build_directive("exclude-gpu-model", "RTX 3090", until, NOW, "alice", "")
    assert isinstance(model, ExcludeGpuModel) and model.gpu_model == "RTX 3090" and model.expires_at == until
    host = build_directive("exclude_host", "4711", until, NOW, "alice", "flaky disks")
    assert isinstance(host, ExcludeHost) and host.host_id == 4711 and host.instruction == "flaky disks"
    budget = build_directive("cap_budget", "$5.50/h", until, NOW, "alice", "")
    assert isinstance(budget, CapBudget) and budget.max_usd_per_h == 5.5
    drain = build_directive("drain_by", "17:00", until, NOW, "alice", "")
    assert isinstance(drain, DrainBy) and drain.drain_by == NOW.replace(hour=17, minute=0)
    lever = build_directive("lever", "park=off", until, NOW, "alice", "")
    assert isinstance(lever, SetLever) and (lever.lever, lever.state) == ("park", "off")

    with pytest.raises(ValueError, match="cap_instances 'eight': expected a number of machines"):
        build_directive("cap_instances", "eight", until, NOW, "alice", "")
    with pytest.raises(ValueError, match="'cap_gpus': expected one of exclude_gpu_model"):
        build_directive("cap_gpus", "8", until, NOW, "alice", "")
    with pytest.raises(ValueError, match="drain_by"):  # the drain moment after the directive's own end
        build_directive("drain_by", "20:00", NOW + timedelta(hours=1), NOW, "alice", "")
    with pytest.raises(ValueError, match="lever"):
        build_directive("lever", "park", until, NOW, "alice", "")


async def test_add_list_and_revoke_against_a_running_decider(settings: Settings, nc: NatsClient) -> None:
    async with running_decider(settings):
        code, out, err = await asyncio.to_thread(
            cli, settings, "directives", "add", "cap_instances", "6", "--until", "4h", "--by", "alice"
        )
        assert code == 0 and out.startswith("directive #1 stored: "), err
        code, out, err = await asyncio.to_thread(
            cli, settings, "directives", "add", "exclude_gpu_model", "RTX 3090", "--until", "2d", "--by", "bob"
        )
        assert code == 0 and "directive #2 stored" in out, err
        code, out, err = await asyncio.to_thread(cli, settings, "directives", "revoke", "1", "--by", "carol")
        assert code == 0 and out.strip() == "directive #1 revoked", err

        code, out, err = await asyncio.to_thread(cli, settings, "directives")
        assert code == 0, err
        [header, newest, oldest] = [line for line in out.splitlines() if line.strip()]
        assert header.split()[:3] == ["#", "directive", "until"]
        assert newest.split()[0] == "2" and "no RTX 3090" in newest and "bob (cli)" in newest and "active" in newest
        assert oldest.split()[0] == "1" and "at most 6 machines" in oldest and "by carol" in oldest

        # the decider's refusals are one line on stderr and a failed exit
        code, out, err = await asyncio.to_thread(cli, settings, "directives", "revoke", "1")
        assert code == 1 and out == "" and "#1 was revoked already, by carol" in err
        loosening = str(settings.max_instances + 100)  # depends on the enforcement's check_new
        code, out, err = await asyncio.to_thread(
            cli, settings, "directives", "add", "cap_instances", loosening, "--until", "4h"
        )
        assert code == 1 and err.startswith("refused: "), out
        # a mistake in the command line is the CLI's own, before anything is sent
        code, _, err = await asyncio.to_thread(
            cli, settings, "directives", "add", "cap_instances", "6", "--until", "soon"
        )
        assert code == 2 and "--until" in err


async def test_without_a_decider_or_nats_one_line_and_a_failed_exit(settings: Settings, nc: NatsClient) -> None:
    code, out, err = await asyncio.to_thread(cli, settings, "directives")
    assert code == 1 and out == ""
    assert "no answer from the decider" in err and "unknown, not none" in err and len(err.splitlines()) == 1

    nowhere = settings.model_copy(update={"nats_url": f"nats://127.0.0.1:{free_port()}"})
    code, out, err = await asyncio.to_thread(cli, nowhere, "directives", "revoke", "3")
    assert code == 2 and out == "" and "cannot reach NATS" in err and len(err.splitlines()) == 1
