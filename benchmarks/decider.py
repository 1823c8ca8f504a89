"""Decider: P0 trigger → run start latency through the real service on loopback NATS and Redis, beside the raw
NATS request round trip measured in the same run; plus the pure policy's decision time on a 1000-machine fleet."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import numpy as np
from nats.aio.msg import Msg

from benchmarks.common import write_result
from services.decider.app import wire
from services.decider.config import DeciderSettings
from services.decider.guardrails import GuardrailConfig, check, ledger_from
from services.decider.policy import recommend
from shared.bus import event_headers
from shared.clock import RealClock
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
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import LATEST, TRIGGERS, ensure_streams
from sim.infra import NatsServer, RedisServer

TRIGGERS_MEASURED = 1000
WARMUP = 20
RTT_REQUESTS = 1000
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


def fleet_snapshot(now: datetime, machines: int) -> FleetSnapshot:
    states = [InstanceState.PRODUCING] * 8 + [InstanceState.LOADING, InstanceState.DRAINING]
    lines = [
        InstanceLine(
            instance_id=i, state=states[i % len(states)], gpu_model="RTX 4090" if i % 2 else "RTX 5090",
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


async def measure_service(nats_url: str, redis_url: str) -> dict[str, Any]:
    # live: the run publishes its commands, as in production (shadow would skip the publish being measured)
    settings = Settings(nats_url=nats_url, redis_url=redis_url, subject_prefix="fpbench", decider_mode="live")
    subjects = settings.subjects
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js, subjects)
    now = datetime.now(UTC)
    for subject, event in (
        (subjects.demand_signal, demand_signal(now, pending=8, rate_per_h=300)),
        (subjects.fleet_snapshot_published, fleet_snapshot(now, 4)),
    ):
        body = event.model_dump_json().encode()
        await js.publish(subject, body, headers=event_headers(event), stream=LATEST.name(subjects))

    config = DeciderSettings(
        run_at_start=False, heartbeat_s=3600, max_runs_per_h=10**6, max_p0_runs_per_h=10**6,
        snapshot_request_timeout_s=0.5, signal_max_age_s=3600, snapshot_max_age_s=3600,
    )  # fmt: skip
    app, _ = wire(ServiceContext("decider", settings, RealClock()), config=config)
    records: dict[str, DecisionRecord] = {}
    arrived = asyncio.Event()

    async def on_record(msg: Msg) -> None:
        record = DecisionRecord.model_validate_json(msg.data)
        for ref in record.triggers:
            if ref.event_id:
                records[ref.event_id] = record
        arrived.set()

    await nc.subscribe(subjects.decision_audit, cb=on_record)
    await app.start()
    latencies_s, round_trips_s = [], []
    try:
        for i in range(WARMUP + TRIGGERS_MEASURED):
            trigger = Trigger(occurred_at=datetime.now(UTC), source="bench", priority="p0",
                              reason=TriggerReason.INSTANCE_RUNNING)  # fmt: skip
            sent = time.perf_counter()
            await js.publish(subjects.trigger("p0", trigger.reason), trigger.model_dump_json().encode(),
                             headers=event_headers(trigger), stream=TRIGGERS.name(subjects))  # fmt: skip
            while trigger.event_id not in records:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), timeout=10)
            record = records.pop(trigger.event_id)
            if i >= WARMUP:
                latencies_s.append((record.started_at - trigger.occurred_at).total_seconds())
                round_trips_s.append(time.perf_counter() - sent)
    finally:
        await app.stop()

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe("fpbench.rtt", cb=echo)
    rtts_s = []
    payload = Trigger(occurred_at=now, source="bench", priority="p0", reason=TriggerReason.INSTANCE_RUNNING)
    body = payload.model_dump_json().encode()
    for i in range(WARMUP + RTT_REQUESTS):
        start = time.perf_counter()
        await nc.request("fpbench.rtt", body, timeout=5)
        if i >= WARMUP:
            rtts_s.append(time.perf_counter() - start)
    await nc.close()
    return {"p0": percentiles_ms(latencies_s), "audit": percentiles_ms(round_trips_s), "rtt": percentiles_ms(rtts_s)}


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("fleetpilot.decider").setLevel(logging.WARNING)
    logging.getLogger("faststream").setLevel(logging.WARNING)
    with NatsServer() as nats_server, RedisServer() as redis_server:
        service = asyncio.run(measure_service(nats_server.url, redis_server.url))
    cores = measure_pure_cores()
    result = {
        "p0_latency_ms_p50": round(service["p0"]["p50"], 3),
        "p0_latency_ms_p99": round(service["p0"]["p99"], 3),
        "nats_rtt_ms_p50": round(service["rtt"]["p50"], 3),
        "nats_rtt_ms_p99": round(service["rtt"]["p99"], 3),
        "p0_to_audit_record_ms_p50": round(service["audit"]["p50"], 3),
        "p0_to_audit_record_ms_p99": round(service["audit"]["p99"], 3),
        "p0_latency_over_nats_rtt_p50": round(service["p0"]["p50"] / service["rtt"]["p50"], 2),
        "triggers": TRIGGERS_MEASURED,
        "rtt_requests": RTT_REQUESTS,
        "policy_decision_ms_p50": round(cores["policy"]["p50"], 3),
        "policy_decision_ms_p99": round(cores["policy"]["p99"], 3),
        "guardrail_check_ms_p50": round(cores["guardrails"]["p50"], 3),
        "guardrail_check_ms_p99": round(cores["guardrails"]["p99"], 3),
        "policy_fleet_machines": FLEET_MACHINES,
    }
    rows = [
        ("P0 trigger → run start (JetStream → decider → Redis lock)", "p0_latency_ms"),
        ("P0 trigger published → audit record received", "p0_to_audit_record_ms"),
        ("reference: raw NATS request round trip", "nats_rtt_ms"),
        (f"policy decision, {FLEET_MACHINES} machines (pure)", "policy_decision_ms"),
        (f"guardrail ledger + check, {FLEET_MACHINES} machines (pure)", "guardrail_check_ms"),
    ]
    print(f"{'measured':62} {'p50 ms':>10} {'p99 ms':>10}")
    for label, key in rows:
        print(f"{label:62} {result[f'{key}_p50']:>10.3f} {result[f'{key}_p99']:>10.3f}")
    path = write_result("decider", result)
    print(f"\n{TRIGGERS_MEASURED} triggers, {RTT_REQUESTS} requests on loopback; wrote {path}")


if __name__ == "__main__":
    main()
