"""The fault suite's stack: every service as its own process on private NATS and Redis and the simulators, the
replayed job system, and what each fault is judged by (health, exactly-once, launches, budget, dead letters, secrets).

Healthy, precisely: every service process is up; demand has applied every task event JetStream acknowledged before
the fault ended; fleet's snapshot lists exactly the instances vast.ai's ledger has not destroyed; and the decider
has finished a run with fresh inputs whose record reached the audit stream after the fault ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import nats
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from shared.contract import DeadLetter, DecisionRecord, FleetSnapshot, FleetSnapshotRequest, TaskEvent
from shared.settings import Settings
from shared.streams import AUDIT, BENCH, DEMAND, DLQ, INSTANCES, LATEST, OPERATOR, TRIGGERS
from sim.infra import RedisServer
from sim.jobs.runner import window_of
from sim.stack import SERVICES, TRACES_DIR, Stack, StackPlan
from sim.world.trace import load_trace
from tests.faults.replay import Replayer

PREFIX = "fp"
SUBJECTS = Settings(subject_prefix=PREFIX).subjects
LABEL = re.compile(r"^fleetpilot:(.+):(\d+)$")
JOURNAL_KEY = f"fleetpilot:{PREFIX}:demand:seen_event_ids"  # demand's de-duplication journal (services/demand/store.py)
DECIDER_LOCK_KEY = f"{PREFIX}:decider:lock"  # services/decider/lock.py
DECIDER_FENCE_KEY = f"{PREFIX}:decider:fence"  # the fencing-token counter beside the lock
DEMAND_SEEN_CAPACITY = 50_000  # services/demand/config.py seen_event_ids: the journal is complete below this
POLL_S = 0.25

CLOSE_STEP_S = 30.0  # wall seconds one teardown step may take before it is abandoned
# Bounds on waits for an outcome, not measurements (recovery_s is what the table reports). They are generous
# because a loaded machine (six test runs on two cores) takes several times longer to restart five Python
# processes than an idle one; a bound that is merely tight turns slowness into a reported loss or outage.
WARM_UP_S = 180.0
RECOVER_S = 120.0
# wall seconds for the first act of a service just restarted, or a stream's new leader: a Python service's imports
# and one JetStream consumer per subject took over 30 s on a loaded 2-core machine (a fault test failed so)
RESTART_WAIT_S = 120.0
SETTLE_S = 90.0


async def _quiet(error: Exception) -> None:
    """Connection errors are expected here: the suite kills the broker."""


async def _abandoned_after(step: Coroutine[Any, Any, Any], timeout_s: float) -> None:
    """Run a teardown step for at most `timeout_s`, then leave it: unlike `asyncio.wait_for`, never wait for a
    cancellation the step might swallow (nats-py's own wait_for can), which once held a module's teardown until the
    hang guard and left its processes running."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
    elif not task.cancelled():
        task.exception()  # read and dropped: a client the faults broke may fail to close, and that is no finding


def fault_plan(speed: float = 720.0, hours: int = 18) -> StackPlan:
    """The diurnal trace from 06:00 at 15% volume (2 to 10 machines), long enough to outlast a module's faults."""
    return StackPlan(TRACES_DIR / "diurnal.csv", 6 * 60, hours * 60, 0.15, speed, 2 * 3600.0, 10.0, 20)


# The trace window lasts 18 simulated hours, 90 s of wall time at x720, while a module's faults can take ten
# minutes on a loaded machine: after the window the job system goes on submitting one task every 5 simulated
# minutes, so a late fault still happens under traffic (a row with nothing published fails), and a module stays
# well below demand's journal cap (DEMAND_SEEN_CAPACITY).
TRICKLE_EVERY_MIN = 5

# Faster timers for an accelerated clock: a lock left by a killed decider expires in wall time (default 30 s).
DEFAULT_PROCESS_ENV = {"decider": {"FLEETPILOT_DECIDER_LOCK_TTL_S": "3"}}


@dataclass
class Row:
    fault: str
    published: int
    processed: int
    duplicates_applied: int
    lost: int
    double_launches: int
    budget_breaches: int
    recovery_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Window:
    """What was true when a fault began, to measure the fault's own effect."""

    fault: str
    acked_from: int
    double_launches: int
    budget_breaches: int
    audit_seq: int = 0
    ended_wall_s: float = 0.0
    acked_at_end: int = 0


@dataclass
class Health:
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def metric_total(samples: Iterable[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(
        value
        for n, sample_labels, value in samples
        if n == name and all(sample_labels.get(k) == v for k, v in labels.items())
    )


def double_launches(ledger: dict[str, Any]) -> int:
    """Instances beyond the first for one launch slot: a `fleetpilot:<deployment>:<key>:<n>` labels one instance."""
    labels = Counter(e["label"] for e in ledger["entries"] if e.get("label") and LABEL.match(e["label"]))
    return sum(count - 1 for count in labels.values() if count > 1)


def budget_breaches(ledger: dict[str, Any], plan: StackPlan) -> int:
    """Limits the account ever went over, from the simulator's own accounting (0, 1 or 2)."""
    return int(ledger["peak_committed_usd_per_h"] > plan.budget_usd_per_h + 1e-9) + int(
        ledger["peak_instances"] > plan.max_instances
    )


class FaultStack:
    def __init__(
        self,
        workdir: Path,
        plan: StackPlan | None = None,
        *,
        process_env: dict[str, dict[str, str]] | None = None,
        nats_nodes: int = 1,
    ) -> None:
        self.plan = plan or fault_plan()
        # a key that looks like one: the suite greps everything it captured for it
        self.api_key = f"vk-{secrets.token_hex(20)}"
        env = {k: dict(v) for k, v in DEFAULT_PROCESS_ENV.items()}
        for name, extra in (process_env or {}).items():
            env.setdefault(name, {}).update(extra)
        self.stack = Stack(self.plan, workdir, api_key=self.api_key, process_env=env, nats_nodes=nats_nodes)
        self.workdir = workdir
        self.settings: Settings | None = None
        self.replayer: Replayer | None = None
        self.nc: NatsClient | None = None
        self.js: JetStreamContext | None = None
        self.redis: aioredis.Redis | None = None
        self.http = httpx.AsyncClient(timeout=5.0)
        self.expected_dead_letters: Counter[tuple[str, str]] = Counter()
        self.journal: list[str] = []
        self.journal_counts: Counter[str] = Counter()
        self.demand_pids: set[int] = set()

    # ---- life ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.to_thread(self.stack.start)
        self.settings = Settings(
            nats_url=self.stack.nats.url,
            redis_url=self.stack.redis.url,
            subject_prefix=PREFIX,
            vast_api_url=self.url("vast"),
            vast_api_key=SecretStr(self.api_key),
            clock_speed=self.plan.speed,
            clock_sim_epoch=self.stack.sim_epoch,
            clock_wall_epoch_s=self.stack.wall_epoch_s,
        )
        self.nc = await nats.connect(
            servers=self.settings.nats_servers, max_reconnect_attempts=-1, reconnect_time_wait=0.2, error_cb=_quiet
        )
        self.js = self.nc.jetstream()
        self.redis = aioredis.Redis.from_url(self.stack.redis.url, socket_timeout=2.0, socket_connect_timeout=2.0)
        trace = window_of(
            list(load_trace(self.plan.trace).arrivals_per_min),
            self.plan.start_minute,
            self.plan.minutes,
            self.plan.scale,
        )
        self.replayer = Replayer(self.settings, self.settings.make_clock(), trace, trickle_every_min=TRICKLE_EVERY_MIN)
        await self.replayer.start()
        self.demand_pids.add(self.stack.pid("demand"))

    async def close(self) -> None:
        # a client stuck on a broken server must not hold the suite: each step is bounded, and the processes
        # are stopped (then killed) whatever happened before
        if self.replayer is not None:
            await _abandoned_after(self.replayer.close(), CLOSE_STEP_S)
        for client in (self.nc, self.redis):
            if client is not None:
                await _abandoned_after(
                    client.aclose() if isinstance(client, aioredis.Redis) else client.close(), CLOSE_STEP_S
                )
        await _abandoned_after(self.http.aclose(), CLOSE_STEP_S)
        await asyncio.to_thread(self.stack.close)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.stack.ports[name]}"

    def now(self) -> datetime:
        return self.stack.now()

    async def sleep_sim(self, seconds: float) -> None:
        await asyncio.sleep(seconds / self.plan.speed)

    async def warm_up(self, timeout_s: float = WARM_UP_S) -> None:
        """Until machines are rented and the system is healthy: faults are injected into a working system."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ledger = await self.ledger()
            if ledger and ledger["entries"] and (await self.health(Window("warm-up", 0, 0, 0))).ok:
                return
            await asyncio.sleep(POLL_S)
        raise AssertionError(
            f"the stack did not warm up in {timeout_s}s: {(await self.health(Window('', 0, 0, 0))).problems}"
        )

    # ---- observation -----------------------------------------------------------------------------------------
    async def metrics(self, service: str) -> list[tuple[str, dict[str, str], float]]:
        try:
            return parse_metrics((await self.http.get(f"{self.url(service)}/metrics")).text)
        except httpx.HTTPError:
            return []

    async def ledger(self) -> dict[str, Any] | None:
        try:
            response = await self.http.get(f"{self.url('vast')}/_sim/ledger")
            return dict(response.json()) if response.status_code == 200 else None
        except httpx.HTTPError:
            return None

    async def vast_admin(self, path: str, body: Any = None, method: str = "POST") -> Any:
        response = await self.http.request(method, f"{self.url('vast')}/_sim/{path}", json=body)
        response.raise_for_status()
        return response.json()

    async def ollama_admin(self, path: str, body: Any = None) -> Any:
        response = await self.http.post(f"{self.url('ollama')}/_sim/{path}", json=body)
        response.raise_for_status()
        return response.json()

    async def fleet_snapshot(self) -> FleetSnapshot | None:
        assert self.nc is not None
        request = FleetSnapshotRequest(occurred_at=self.now(), source="fault-suite")
        try:
            reply = await self.nc.request(SUBJECTS.fleet_snapshot, request.model_dump_json().encode(), timeout=2.0)
            return FleetSnapshot.model_validate_json(reply.data)
        except Exception:
            return None

    async def refresh_journal(self) -> bool:
        """Read what demand appended to its journal since the last look (it only appends below its capacity)."""
        assert self.redis is not None
        try:
            new = await self.redis.lrange(JOURNAL_KEY, len(self.journal), -1)
        except Exception:
            return False
        ids = [_text(raw) for raw in new]
        self.journal += ids
        self.journal_counts.update(ids)
        assert len(self.journal) < DEMAND_SEEN_CAPACITY, "the journal reached demand's cap: shorten the run"
        return True

    async def read_stream(self, stream: str) -> list[bytes]:
        """Every message now in a stream (an ephemeral consumer that acks nothing)."""
        assert self.js is not None
        info = await self.js.stream_info(stream)
        if info.state.messages == 0:
            return []
        subscription = await self.js.pull_subscribe(
            "",
            stream=stream,
            config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30),
        )
        found: list[bytes] = []
        try:
            while len(found) < info.state.messages:
                try:
                    batch = await subscription.fetch(1000, timeout=1.0)
                except TimeoutError:
                    break
                found += [bytes(m.data or b"") for m in batch]
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        return found

    async def stream_census(self) -> dict[str, Any]:
        """The task events the DEMAND stream holds, against what the job system was told was acknowledged."""
        assert self.replayer is not None
        ids: Counter[str] = Counter()
        for raw in await self.read_stream(DEMAND.name(SUBJECTS)):
            with contextlib.suppress(ValueError):
                ids[TaskEvent.model_validate_json(raw).event_id] += 1
        acked = set(self.replayer.acked)
        unacked_in_stream = [i for i in ids if i not in acked]
        return {
            "stream_task_messages": sum(ids.values()),
            "stream_unique": len(ids),
            "in_stream_not_acked": len(unacked_in_stream),
            "not_acked_but_applied": sum(1 for i in unacked_in_stream if i in self.journal_counts),
            "acked_not_in_stream": sum(1 for i in acked if i not in ids),
            "publish_retries": self.replayer.publish_retries,
        }

    async def dead_letters(self) -> list[DeadLetter]:
        return [DeadLetter.model_validate_json(raw) for raw in await self.read_stream(DLQ.name(SUBJECTS))]

    async def audit_seq(self) -> int:
        assert self.js is not None
        try:
            return int((await self.js.stream_info(AUDIT.name(SUBJECTS))).state.last_seq)
        except Exception:
            return 0

    async def last_decision(self) -> tuple[int, DecisionRecord] | None:
        assert self.js is not None
        try:
            raw = await self.js.get_last_msg(AUDIT.name(SUBJECTS), SUBJECTS.decision_audit)
        except Exception:
            return None
        return int(raw.seq or 0), DecisionRecord.model_validate_json(raw.data or b"")

    async def ack_pending(self, stream: str, durable: str) -> int:
        assert self.js is not None
        try:
            return int((await self.js.consumer_info(stream, durable)).num_ack_pending)
        except Exception:
            return 0

    async def lock_held(self) -> bool:
        assert self.redis is not None
        try:
            return bool(await self.redis.exists(DECIDER_LOCK_KEY))
        except Exception:
            return False

    # ---- health and measurement ------------------------------------------------------------------------------
    async def health(self, window: Window, *, down: Iterable[str] = ()) -> Health:
        health = Health()
        crashed = [name for name in self.stack.crashed() if name not in down]
        if crashed:
            health.problems.append(f"processes down: {crashed}")
        if not await self.refresh_journal():
            health.problems.append("redis unreachable")
            return health
        assert self.replayer is not None
        acked = self.replayer.acked_ids[: window.acked_at_end or None]
        missing = sum(1 for event_id in acked if event_id not in self.journal_counts)
        if missing:
            health.problems.append(f"demand has not applied {missing} acknowledged events")
        ledger, snapshot = await self.ledger(), await self.fleet_snapshot()
        if ledger is None or snapshot is None:
            health.problems.append("no ledger" if ledger is None else "fleet does not answer")
        else:
            live = {int(e["instance_id"]) for e in ledger["entries"] if e["destroyed_at"] is None}
            known = {line.instance_id for line in snapshot.instances}
            if live != known:
                health.problems.append(
                    f"fleet≠vast: only fleet {sorted(known - live)}, only vast {sorted(live - known)}"
                )
        last = await self.last_decision()
        if last is None or last[0] <= window.audit_seq:
            health.problems.append("no decider run since the fault")
        elif last[1].signal_freshness != "fresh" or last[1].snapshot_freshness != "fresh":
            health.problems.append(f"last run's inputs: {last[1].signal_freshness}/{last[1].snapshot_freshness}")
        return health

    async def begin(self, fault: str) -> Window:
        assert self.replayer is not None
        ledger = await self.ledger()
        assert ledger is not None
        return Window(
            fault,
            acked_from=len(self.replayer.acked),
            double_launches=double_launches(ledger),
            budget_breaches=budget_breaches(ledger, self.plan),
            audit_seq=await self.audit_seq(),
        )

    async def end_fault(self, window: Window) -> None:
        assert self.replayer is not None
        window.ended_wall_s = time.monotonic()
        window.acked_at_end = len(self.replayer.acked)
        window.audit_seq = max(window.audit_seq, await self.audit_seq())

    async def recover(self, window: Window, timeout_s: float = RECOVER_S) -> float:
        """Wall seconds from the fault's end until healthy (see the module docstring)."""
        deadline = time.monotonic() + timeout_s
        health = Health(["not checked"])
        while time.monotonic() < deadline:
            health = await self.health(window)
            if health.ok:
                return round(time.monotonic() - window.ended_wall_s, 2)
            await asyncio.sleep(POLL_S)
        raise AssertionError(f"{window.fault}: not healthy {timeout_s}s after the fault: {health.problems}")

    async def settle(self, timeout_s: float = SETTLE_S) -> None:
        """Stop the job system and wait until demand has applied everything JetStream acknowledged."""
        assert self.replayer is not None
        await self.replayer.pause()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await self.refresh_journal()
            if all(event_id in self.journal_counts for event_id in self.replayer.acked):
                return
            await asyncio.sleep(POLL_S)

    async def conclude(self, window: Window, rows: list[Row]) -> Row:
        """The fault is over: `end_fault`, `recover` and `finish`, for a test with nothing to do in between."""
        await self.end_fault(window)
        return await self.finish(window, await self.recover(window), rows)

    async def finish(self, window: Window, recovery_s: float, rows: list[Row]) -> Row:
        """Settle, count, add the row to the table, then check every invariant; the job system resumes after."""
        assert self.replayer is not None
        await self.settle()
        try:
            ids = self.replayer.acked_ids[window.acked_from :]
            ledger = await self.ledger()
            assert ledger is not None
            processed = sum(1 for i in ids if i in self.journal_counts)
            row = Row(
                fault=window.fault,
                published=len(ids),
                processed=processed,
                duplicates_applied=sum(self.journal_counts[i] - 1 for i in ids if self.journal_counts[i] > 1),
                lost=len(ids) - processed,
                double_launches=double_launches(ledger) - window.double_launches,
                budget_breaches=budget_breaches(ledger, self.plan) - window.budget_breaches,
                recovery_s=recovery_s,
            )
            rows.append(row)
            await self.check_invariants(row)
            return row
        finally:
            self.replayer.resume()

    async def check_invariants(self, row: Row) -> None:
        """Every fault ends here: exactly once, one instance per launch slot, budget, dead letters, secrets."""
        assert row.published > 0, f"{row.fault}: no task event was published during the fault"
        assert row.lost == 0, f"{row.fault}: {row.lost} acknowledged events never applied"
        assert row.duplicates_applied == 0, f"{row.fault}: {row.duplicates_applied} events applied twice"
        assert self.journal_counts.most_common(1)[0][1] == 1, "an event id was applied twice"
        assert row.double_launches == 0, f"{row.fault}: a launch slot got two instances"
        assert row.budget_breaches == 0, f"{row.fault}: the budget or the instance cap was exceeded"
        assert budget_breaches(await self.ledger() or {}, self.plan) == 0
        if self.stack.pid("demand") in self.demand_pids and len(self.demand_pids) == 1:
            # demand never restarted: its own count of applied events agrees with its journal
            # (the journal also holds the queue and fleet snapshots demand observed: only task events count here)
            applied = metric_total(await self.metrics("demand"), "fleetpilot_demand_task_events_total")
            assert self.replayer is not None
            journalled = sum(1 for event_id in self.replayer.acked if event_id in self.journal_counts)
            assert applied == journalled, (
                f"demand counted {applied} applied task events, its journal {journalled}: {await self.stream_census()}"
            )
        parked = await self.dead_letters()
        letters = Counter((letter.service, letter.original_subject) for letter in parked)
        unexpected = letters - self.expected_dead_letters
        why = [f"{p.service} {p.original_subject}: {p.reason} after {p.delivery_count} deliveries: {p.error[:300]}"
               for p in parked if (p.service, p.original_subject) in unexpected]  # fmt: skip
        assert letters == self.expected_dead_letters, (
            f"{row.fault}: dead letters other than the poison: {unexpected}, "
            f"poison not dead-lettered: {self.expected_dead_letters - letters}; why: {why}"
        )
        findings = await self.secret_findings()
        assert not findings, f"the vast API key was found in: {findings}"

    def note_restart(self, name: str) -> None:
        if name == "demand":
            self.demand_pids.add(self.stack.pid("demand"))

    # ---- secrets ---------------------------------------------------------------------------------------------
    async def captured(self) -> AsyncIterator[tuple[str, str]]:
        """Everything the suite can see that a secret must never reach."""
        # the processes' logs and the servers' (one level down); not rglob: it would walk JetStream's store, whose
        # consumer directories nats-server removes while the walk is in them (FileNotFoundError)
        for path in sorted([*self.workdir.glob("*.log"), *self.workdir.glob("*/*.log")]):
            yield str(path.relative_to(self.workdir)), path.read_text(errors="replace")
        for name in SERVICES:
            with contextlib.suppress(httpx.HTTPError):
                yield f"{name} /metrics", (await self.http.get(f"{self.url(name)}/metrics")).text
        for spec in (AUDIT, DLQ, TRIGGERS, INSTANCES, BENCH, OPERATOR, LATEST):
            with contextlib.suppress(Exception):
                for raw in await self.read_stream(spec.name(SUBJECTS)):
                    yield f"stream {spec.name(SUBJECTS)}", raw.decode(errors="replace")
        with contextlib.suppress(httpx.HTTPError):
            yield "ollama prompts", (await self.http.get(f"{self.url('ollama')}/_sim/received?full=1")).text
        with contextlib.suppress(httpx.HTTPError):
            yield "vast request log", (await self.http.get(f"{self.url('vast')}/_sim/calls")).text
        for key, value in (await self.redis_dump()).items():
            yield f"redis {key}", json.dumps(value)

    async def secret_findings(self) -> list[str]:
        needles = (self.api_key, self.api_key[3:19])  # the key, and a piece of it (a truncated print)
        return [where async for where, text in self.captured() if any(n in text for n in needles)]

    async def redis_dump(self, client: aioredis.Redis | None = None) -> dict[str, Any]:
        """Every key's value, read by type; keys with an expiry are marked (they may legitimately vanish)."""
        client = client or self.redis
        assert client is not None
        found: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            async for raw_key in client.scan_iter(count=500):
                key = _text(raw_key)
                kind = _text(await client.type(raw_key))
                value: Any
                if kind == "string":
                    value = _text(await client.get(raw_key) or b"")
                elif kind == "list":
                    value = [_text(v) for v in await client.lrange(raw_key, 0, -1)]
                elif kind == "hash":
                    value = {_text(k): _text(v) for k, v in (await client.hgetall(raw_key)).items()}
                elif kind == "zset":
                    rows: list[Any] = await client.zrange(raw_key, 0, -1, withscores=True)
                    value = [[_text(row[0]), row[1]] for row in rows]
                elif kind == "set":
                    value = sorted(_text(v) for v in await client.smembers(raw_key))
                else:
                    value = f"<{kind}>"
                volatile = (await client.pttl(raw_key)) > 0
                found[key] = {"value": value, "expires": volatile}
        return found

    async def redis_dump_of_files(self) -> dict[str, Any]:
        """What a redis-server started on a copy of the data directory loads: what Redis made durable."""
        copy = Path(tempfile.mkdtemp(prefix="fleetpilot-redis-copy-"))
        shutil.copytree(self.stack.redis.data_dir, copy, dirs_exist_ok=True)
        server = RedisServer(data_dir=copy)
        await asyncio.to_thread(server.start)
        client = aioredis.Redis.from_url(server.url, socket_timeout=5.0)
        try:
            for _ in range(100):  # the AOF is replayed before the server answers PING with PONG
                with contextlib.suppress(Exception):
                    if await client.ping():
                        break
                await asyncio.sleep(0.05)
            return await self.redis_dump(client)
        finally:
            await client.aclose()
            await asyncio.to_thread(server.stop)
            shutil.rmtree(copy, ignore_errors=True)


@contextlib.asynccontextmanager
async def running_stack(prefix: str, **kwargs: Any) -> AsyncIterator[FaultStack]:
    workdir = Path(tempfile.mkdtemp(prefix=f"fleetpilot-faults-{prefix}-"))
    stack = FaultStack(workdir, **kwargs)
    try:
        await stack.start()
        await stack.warm_up()
        yield stack
    finally:
        await stack.close()
        if os.environ.get("FLEETPILOT_FAULTS_KEEP"):
            print(f"fault stack logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
