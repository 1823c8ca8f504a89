"""Decider: P0 trigger → first command published, with the decider as its own process on loopback NATS and Redis,
beside the raw NATS request round trip measured in the same run; plus the pure policy's decision time on a
1000-machine fleet."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import numpy as np
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from benchmarks.common import write_result
from services.decider.guardrails import GuardrailConfig, check, ledger_from
from services.decider.policy import recommend
from shared.bus import event_headers
from shared.contract import (
    DecisionRecord,
    DemandSignal,
    DemandState,
    DemandTrend,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    Trigger,
    TriggerReason,
    WindowStats,
)
from shared.processes import free_port, stop_process
from shared.settings import Settings
from shared.streams import LATEST, TRIGGERS, ensure_streams
from sim.infra import NatsServer, RedisServer

TRIGGERS_MEASURED = 1000
WARMUP = 20
STARTUP_TIMEOUT_S = 60.0
TARGET_OVER_RTT_P99 = 10.0  # issue 18: trigger → first command p99 within ten NATS round trips p99
PREFIX = "fpbench"
REPO = Path(__file__).resolve().parent.parent
POLICY_DECISIONS = 200
FLEET_MACHINES = 1000


def percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    values = np.array(samples_s) * 1000
    return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99))}


def demand_signal(now: datetime, *, pending: int, rate_per_h: float) -> DemandSignal:
    windows = [
        WindowStats(window_s=s, arrival_rate_per_h=rate_per_h, completion_rate_per_h=rate_per_h,
                    failure_rate_per_h=0, arrival_trend_per_h2=0)
        for s in (300, 1800, 7200)
    ]  # fmt: skip
    return DemandSignal(
        occurred_at=now, source="bench", state=DemandState.SERVED, explanation="bench", trend=DemandTrend.STEADY,
        pending_tasks=pending, running_tasks=0, windows=windows, sustained_arrival_rate_per_h=rate_per_h,
        producing_workers=0, per_worker_throughput_tasks_per_h=120, fleet_capacity_tasks_per_h=0,
        backlog_worker_hours=pending / 120, above_capacity_for_s=0, signal_seq=1,
    )  # fmt: skip


def fleet_snapshot(now: datetime, machines: int, *, failed: int = 0, first_id: int = 0) -> FleetSnapshot:
    states = [InstanceState.PRODUCING] * 8 + [InstanceState.LOADING, InstanceState.DRAINING]
    lines = [
        InstanceLine(
            instance_id=first_id + i, state=InstanceState.FAILED if i < failed else states[i % len(states)],
            gpu_model="RTX 4090" if i % 2 else "RTX 5090",
            price_usd_per_h=0.4 + (i % 7) * 0.02, created_at=now - timedelta(hours=3),
            state_since=now - timedelta(hours=1, minutes=i % 50), last_task_at=now - timedelta(seconds=i % 3000),
            throughput_tasks_per_h=100 + i % 40, line=f"#{i}",
        )
        for i in range(machines)
    ]  # fmt: skip
    counts: dict[InstanceState, int] = {}
    for line in lines:
        counts[line.state] = counts.get(line.state, 0) + 1
    return FleetSnapshot(
        occurred_at=now, source="bench", instances=lines, counts_by_state=counts,
        spend_usd_per_h=sum(line.price_usd_per_h for line in lines),
        producing_instances=counts.get(InstanceState.PRODUCING, 0),
        arriving_instances=counts.get(InstanceState.LOADING, 0),
    )  # fmt: skip


def measure_pure_cores() -> dict[str, Any]:
    """The policy and the guardrails as the world simulator calls them: pure functions on 1000 machines."""
    now = datetime(2026, 3, 2, 12, tzinfo=UTC)
    snapshot = fleet_snapshot(now, FLEET_MACHINES)
    signals = [demand_signal(now, pending=p, rate_per_h=r) for p, r in ((8, 90_000), (500, 120_000), (0, 10_000))]
    durations = []
    for i in range(POLICY_DECISIONS):
        start = time.perf_counter()
        recommend(signals[i % len(signals)], snapshot, now)
        durations.append(time.perf_counter() - start)
    config = GuardrailConfig(budget_usd_per_h=1000, max_instances=2000, normal_max_price_usd_per_h=0.8,
                             emergency_max_price_usd_per_h=1.2)  # fmt: skip
    launch = LaunchInstances(occurred_at=now, source="bench", idempotency_key="bench-launch", requested_by="policy",
                             count=3, launch_priority="normal", reason="sustained_demand")  # fmt: skip
    checks = []
    for _ in range(POLICY_DECISIONS):
        start = time.perf_counter()
        ledger = ledger_from(snapshot, signals[0], [], now, stale=False)
        check(launch, ledger, now, config)
        checks.append(time.perf_counter() - start)
    return {"policy": percentiles_ms(durations), "guardrails": percentiles_ms(checks)}


def start_decider(nats_url: str, redis_url: str, log_path: Path) -> subprocess.Popen[bytes]:
    """`fleetpilot run decider` as its own process, live (a shadow decider would not publish the command)."""
    env = {
        **os.environ,
        "FLEETPILOT_NATS_URL": nats_url,
        "FLEETPILOT_REDIS_URL": redis_url,
        "FLEETPILOT_SUBJECT_PREFIX": PREFIX,
        "FLEETPILOT_DECIDER_MODE": "live",
        "FLEETPILOT_HTTP_HOST": "127.0.0.1",
        "FLEETPILOT_HTTP_PORT": str(free_port()),
        "FLEETPILOT_DECIDER_RUN_AT_START": "false",
        "FLEETPILOT_DECIDER_HEARTBEAT_S": "3600",
        "FLEETPILOT_DECIDER_MAX_RUNS_PER_H": "1000000",
        "FLEETPILOT_DECIDER_MAX_P0_RUNS_PER_H": "1000000",
        "FLEETPILOT_DECIDER_SNAPSHOT_REQUEST_TIMEOUT_S": "0.5",
        "FLEETPILOT_DECIDER_SIGNAL_MAX_AGE_S": "3600",
        "FLEETPILOT_DECIDER_SNAPSHOT_MAX_AGE_S": "3600",
        "PYTHONPATH": str(REPO),
    }
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "run", "decider", "--log-level", "warning"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def measure_service(nats_url: str, redis_url: str, log_path: Path) -> dict[str, Any]:
    """P0 trigger published → the decider's first command received, one trigger at a time, each followed by a raw
    NATS request round trip on the same connection: the reference is measured in the same run, interleaved."""
    subjects = Settings(subject_prefix=PREFIX).subjects
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js, subjects)
    now = datetime.now(UTC)
    # a machine that failed: each run destroys one (the provisioner is not running, so it stays in the snapshot;
    # the loop below publishes a new one before each trigger)
    snapshot = fleet_snapshot(now, 4, failed=1)
    for subject, event in (
        (subjects.demand_signal, demand_signal(now, pending=8, rate_per_h=300)),
        (subjects.fleet_snapshot_published, snapshot),
    ):
        body = event.model_dump_json().encode()
        await js.publish(subject, body, headers=event_headers(event), stream=LATEST.name(subjects))

    commands: asyncio.Queue[float] = asyncio.Queue()
    audited: asyncio.Queue[DecisionRecord] = asyncio.Queue()

    async def on_command(msg: Msg) -> None:
        commands.put_nowait(time.perf_counter())

    async def on_record(msg: Msg) -> None:
        audited.put_nowait(DecisionRecord.model_validate_json(msg.data))

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(subjects.provision_commands_all, cb=on_command)
    await nc.subscribe(subjects.decision_audit, cb=on_record)
    await nc.subscribe(f"{PREFIX}.rtt", cb=echo)
    process = start_decider(nats_url, redis_url, log_path)
    latencies_s, rtts_s = [], []
    try:
        await wait_for_decider(js, subjects, commands, audited)
        for i in range(WARMUP + TRIGGERS_MEASURED):
            # a new failed machine each time: one whose destroy is in flight is not ordered destroyed again
            fresh = fleet_snapshot(datetime.now(UTC), 4, failed=1, first_id=1000 * (i + 1))
            await js.publish(subjects.fleet_snapshot_published, fresh.model_dump_json().encode(),
                             headers=event_headers(fresh), stream=LATEST.name(subjects))  # fmt: skip
            trigger = Trigger(occurred_at=datetime.now(UTC), source="bench", priority="p0",
                              reason=TriggerReason.INSTANCE_RUNNING)  # fmt: skip
            body = trigger.model_dump_json().encode()
            sent = time.perf_counter()
            await js.publish(subjects.trigger("p0", trigger.reason), body, headers=event_headers(trigger),
                             stream=TRIGGERS.name(subjects))  # fmt: skip
            first_command = await asyncio.wait_for(commands.get(), timeout=10)
            record = await asyncio.wait_for(audited.get(), timeout=10)  # the run is over before the next trigger
            assert record.commands_sent, record.outcome
            while not commands.empty():
                commands.get_nowait()
            start = time.perf_counter()
            await nc.request(f"{PREFIX}.rtt", body, timeout=5)
            rtt_s = time.perf_counter() - start
            if i >= WARMUP:
                latencies_s.append(first_command - sent)
                rtts_s.append(rtt_s)
    finally:
        stop_process(process, timeout_s=10)
        await nc.close()
    return {"p0": percentiles_ms(latencies_s), "rtt": percentiles_ms(rtts_s)}


async def wait_for_decider(
    js: JetStreamContext, subjects: Any, commands: asyncio.Queue[float], audited: asyncio.Queue[DecisionRecord]
) -> None:
    """Trigger until the process answers with an audited run (it takes a few seconds to start)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        trigger = Trigger(occurred_at=datetime.now(UTC), source="bench", priority="p0",
                          reason=TriggerReason.INSTANCE_RUNNING)  # fmt: skip
        await js.publish(subjects.trigger("p0", trigger.reason), trigger.model_dump_json().encode(),
                         headers=event_headers(trigger), stream=TRIGGERS.name(subjects))  # fmt: skip
        try:
            await asyncio.wait_for(audited.get(), timeout=1.0)
        except TimeoutError:
            continue
        await asyncio.sleep(0.5)  # let the triggers sent while it started be handled, then drop what they left
        while not audited.empty() or not commands.empty():
            if not audited.empty():
                audited.get_nowait()
            if not commands.empty():
                commands.get_nowait()
        return
    raise RuntimeError(f"the decider process did not answer a trigger within {STARTUP_TIMEOUT_S:.0f} s")


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("fleetpilot.decider").setLevel(logging.WARNING)
    logging.getLogger("faststream").setLevel(logging.WARNING)
    with NatsServer() as nats_server, RedisServer() as redis_server, tempfile.TemporaryDirectory() as tmp:
        service = asyncio.run(measure_service(nats_server.url, redis_server.url, Path(tmp) / "decider.log"))
    cores = measure_pure_cores()
    result = {
        "p0_to_first_command_ms_p50": round(service["p0"]["p50"], 3),
        "p0_to_first_command_ms_p99": round(service["p0"]["p99"], 3),
        "nats_rtt_ms_p50": round(service["rtt"]["p50"], 3),
        "nats_rtt_ms_p99": round(service["rtt"]["p99"], 3),
        "p0_to_first_command_over_nats_rtt_p99": round(service["p0"]["p99"] / service["rtt"]["p99"], 2),
        "target_over_nats_rtt_p99": TARGET_OVER_RTT_P99,
        "decider": "its own process (fleetpilot run decider), live",
        "triggers": TRIGGERS_MEASURED,
        "policy_decision_ms_p50": round(cores["policy"]["p50"], 3),
        "policy_decision_ms_p99": round(cores["policy"]["p99"], 3),
        "guardrail_check_ms_p50": round(cores["guardrails"]["p50"], 3),
        "guardrail_check_ms_p99": round(cores["guardrails"]["p99"], 3),
        "policy_fleet_machines": FLEET_MACHINES,
    }
    rows = [
        ("P0 trigger published → first command received (decider process)", "p0_to_first_command_ms"),
        ("reference: raw NATS request round trip, same run, interleaved", "nats_rtt_ms"),
        (f"policy decision, {FLEET_MACHINES} machines (pure)", "policy_decision_ms"),
        (f"guardrail ledger + check, {FLEET_MACHINES} machines (pure)", "guardrail_check_ms"),
    ]
    print(f"{'measured':62} {'p50 ms':>10} {'p99 ms':>10}")
    for label, key in rows:
        print(f"{label:62} {result[f'{key}_p50']:>10.3f} {result[f'{key}_p99']:>10.3f}")
    path = write_result("decider", result)
    ratio = result["p0_to_first_command_over_nats_rtt_p99"]
    print(f"\nP0 → first command p99 = {ratio:g} × the NATS round trip p99 (target ≤ {TARGET_OVER_RTT_P99:g})")
    print(f"{TRIGGERS_MEASURED} triggers, as many round trips, on loopback; wrote {path}")


if __name__ == "__main__":
    main()
