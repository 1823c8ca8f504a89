"""Two decider processes (`fleetpilot run decider`) on one Redis and one NATS, both receiving every trigger."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal as signals
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from shared.contract import DecisionRecord, Trigger, TriggerReason
from shared.processes import free_port, stop_process
from shared.settings import Settings
from shared.streams import TRIGGERS
from tests.decider.factories import producing, signal, snapshot
from tests.decider.harness import audit_log, publish_inputs, publish_trigger
from tests.helpers import eventually

REPO = Path(__file__).resolve().parents[2]
RUN_S = 1.0  # every run holds the lock this long (the slow advisor)
KILLED_RUN_S = 20.0  # the run the test kills: far longer than any stall of the test process before the kill
LOCK_TTL_S = 1.5


class Replica:
    def __init__(self, name: str, settings: Settings, log_dir: Path, sleep_file: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"decider-{name}.log"
        self.port = free_port()
        env = {
            **os.environ,
            "FLEETPILOT_NATS_URL": settings.nats_url,
            "FLEETPILOT_REDIS_URL": settings.redis_url,
            "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix,
            "FLEETPILOT_HTTP_HOST": "127.0.0.1",
            "FLEETPILOT_HTTP_PORT": str(self.port),
            "FLEETPILOT_DECIDER_REPLICA_ID": name,
            "FLEETPILOT_DECIDER_MODE": "live",
            "FLEETPILOT_DECIDER_ADVISOR": "tests.decider.slow_advisor:build_advisor",
            "FLEETPILOT_TEST_ADVISOR_SLEEP_S": str(RUN_S),
            "FLEETPILOT_TEST_ADVISOR_SLEEP_FILE": str(sleep_file),
            "FLEETPILOT_DECIDER_LOCK_TTL_S": str(LOCK_TTL_S),
            "FLEETPILOT_DECIDER_LOCK_RETRY_S": "0.1",
            "FLEETPILOT_DECIDER_RUN_AT_START": "false",
            "FLEETPILOT_DECIDER_HEARTBEAT_S": "3600",
            "FLEETPILOT_DECIDER_MAX_P0_RUNS_PER_H": "1000",
            "PYTHONPATH": str(REPO),
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", "run", "decider", "--log-level", "warning"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    async def metrics(self) -> str:
        async with httpx.AsyncClient() as client:
            return (await client.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5)).text

    def kill(self) -> None:
        self.process.send_signal(signals.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        stop_process(self.process, timeout_s=10)


@pytest.fixture
def run_s_file(tmp_path: Path) -> Path:
    """How long each replica's next run takes (the slow advisor reads it at the start of every run)."""
    path = tmp_path / "run_s"
    path.write_text(str(RUN_S))
    return path


@pytest.fixture
def replicas(settings: Settings, tmp_path: Path, run_s_file: Path) -> Iterator[dict[str, Replica]]:
    started = {name: Replica(name, settings, tmp_path, run_s_file) for name in ("a", "b")}
    yield started
    for replica in started.values():
        replica.stop()
    for replica in started.values():  # shown when the test fails
        print(f"--- {replica.name}\n{replica.log_path.read_text()[-3000:]}")


def p0() -> Trigger:
    return Trigger(occurred_at=datetime.now(UTC), source="fleet", priority="p0", reason=TriggerReason.INSTANCE_RUNNING)


def replica_of(record: DecisionRecord) -> str:
    return record.run_id.split("-", 1)[0]


def assert_no_overlap(records: list[DecisionRecord]) -> None:
    ordered = sorted(records, key=lambda r: r.started_at)
    for before, after in itertools.pairwise(ordered):
        assert after.started_at >= before.finished_at, f"{before.run_id} and {after.run_id} overlap"
        assert after.fencing_token is not None and before.fencing_token is not None
        # one process keeps its token from run to run; a run by another process always holds a newer one
        if replica_of(after) == replica_of(before):
            assert after.fencing_token >= before.fencing_token
        else:
            assert after.fencing_token > before.fencing_token


async def test_two_processes_never_run_at_once_and_one_takes_over_when_the_other_dies(
    settings: Settings, nc: NatsClient, js: JetStreamContext, replicas: dict[str, Replica], run_s_file: Path
) -> None:
    now = datetime.now(UTC)
    await publish_inputs(js, settings, signal(now, pending=8, rate_per_h=300, producing_workers=4),
                         snapshot(now, producing(4, now)))  # fmt: skip
    audit = await audit_log(nc, settings)

    async def both_subscribed() -> bool:
        names = [info.name async for info in _consumers(js, TRIGGERS.name(settings.subjects))]
        return {"decider-a-p0", "decider-b-p0"} <= set(names)

    await eventually(both_subscribed, timeout_s=25, interval_s=0.2)

    # both receive every trigger for a while; each run holds the lock for a second
    sent = []
    for _ in range(12):
        trigger = p0()
        sent.append(trigger.event_id)
        await publish_trigger(js, settings, trigger)
        await asyncio.sleep(0.25)
    seen = lambda: {ref.event_id for record in audit.items for ref in record.triggers}  # noqa: E731
    await eventually(lambda: set(sent) <= seen(), timeout_s=30)
    assert_no_overlap(audit.items)
    # both replicas received every trigger, and the lock (not luck) kept them apart: one found it busy
    scraped = {name: await replica.metrics() for name, replica in replicas.items()}
    for name, text in scraped.items():
        assert 'fleetpilot_decider_triggers_total{priority="p0",reason="instance_running"} 12.0' in text, name
    assert any('fleetpilot_decider_lock_attempts_total{outcome="busy"} 0.0' not in text for text in scraped.values())

    # kill whichever holds the lock in the middle of a run
    client = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
    lock_key = f"{settings.subject_prefix}:decider:lock"
    last = p0()
    # every run from here on lasts 20 s, so the one the kill is aimed at is still running when it lands (with a
    # second per run, a test process stalled on a loaded machine killed a run that had just finished); a follow-up
    # run of the triggers above, started before, is waited out
    await asyncio.to_thread(run_s_file.write_text, str(KILLED_RUN_S))
    await eventually(lambda: _lock_free(client, lock_key), timeout_s=30, interval_s=0.05)
    freed_at = datetime.now(UTC)  # every run before the killed one started before this
    before = len(audit.items)
    await publish_trigger(js, settings, last)
    holder = await eventually(lambda: client.get(lock_key), timeout_s=10, interval_s=0.01)
    victim, killed_token = holder.split(":")
    replicas[victim].kill()
    # the survivor's run of `last`, once the lock expires, is a short one (a long one, should the test stall past
    # the expiry here, still ends inside the wait below)
    await asyncio.to_thread(run_s_file.write_text, str(RUN_S))
    survivor = "b" if victim == "a" else "a"
    record = await eventually(
        lambda: next((r for r in audit.items[before:] if last.event_id in {t.event_id for t in r.triggers}), None),
        timeout_s=20 + KILLED_RUN_S,
    )
    assert replica_of(record) == survivor
    assert record.fencing_token is not None and record.fencing_token > int(killed_token)
    # the killed run never finished: no record of a run started since the lock was free carries its token (the
    # victim's earlier runs may: a process keeps its token while no other takes the lock in between), and the
    # survivor waited for the expiry
    assert not [r for r in audit.items if r.fencing_token == int(killed_token) and r.started_at >= freed_at]
    assert_no_overlap(audit.items)
    await client.aclose()


async def _consumers(js: JetStreamContext, stream: str):  # type: ignore[no-untyped-def]
    for info in await js._jsm.consumers_info(stream):
        yield info


async def _lock_free(client: aioredis.Redis, lock_key: str) -> bool:
    return await client.get(lock_key) is None
