"""`python -m benchmarks.stack_load`: the whole stack as processes under a big fleet and a heavy trace.

A vast.ai market of ~1,300 machines, 1,000 instances rented up front (launch commands, as an operator would
send), and the job stand-in replaying a steady trace at ~100,000 task events per simulated hour, every service
running as its own process on a shared accelerated clock. Reports task events published vs applied by demand and
by fleet, their lag behind the stream, peak RSS of each process, the decider's run durations, and, as the
reference measured on this machine, demand alone (benchmarks.demand).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import nats
from pydantic import SecretStr

from benchmarks.common import RESULTS_DIR, write_result
from shared.contract import LaunchInstances
from shared.settings import Settings
from shared.streams import COMMANDS, DEMAND
from sim.jobs.runner import window_of
from sim.stack import TRACES_DIR, Stack, StackPlan
from sim.vast.scenario import Scenario
from sim.world.trace import load_trace
from tests.faults.harness import SUBJECTS, metric_total, parse_metrics
from tests.faults.replay import Replayer

NAME = "stack_load"
STEADY_MEAN_ARRIVALS_PER_MIN = 39.95  # sim/traces/steady.csv
EVENTS_PER_TASK = 3  # submitted, started, completed
LAUNCH_BATCH = 25
SAMPLE_S = 2.0
# the job system looks up running instances every 10 simulated minutes: paging 1,000 instances every minute
# would measure the stand-in (40 list calls a minute), not FleetPilot
INSTANCE_POLL_S = 600.0


def big_market(instances: int) -> Scenario:
    """Enough machines for `instances` plus a margin, starting in 10-20 minutes, healthy, no market motion."""
    per_model = instances * 13 // 30 + 10
    return Scenario.model_validate(
        {
            "market": [
                {"gpu_model": "RTX 4090", "count": per_model, "reliability": {"min": 0.97, "max": 0.995}},
                {"gpu_model": "RTX 5090", "count": per_model, "reliability": {"min": 0.97, "max": 0.995}},
                {"gpu_model": "RTX 3090", "count": per_model, "reliability": {"min": 0.97, "max": 0.995}},
            ],
            "startup": {"startup_s": {"min": 600, "max": 1200}},
            "fates": {"stuck_loading": 0, "exit_error": 0, "offline_later": 0, "slow": 0},
            "dynamics": {"price_drift_per_h": 0, "taken_by_others_per_h": 0, "new_offers_per_h": 0},
        }
    )


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM: the most resident memory the process ever had (Linux)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def demand_reference(events: int) -> dict[str, Any]:
    """benchmarks.demand in this run: demand alone against a bare nats-py consumer on the same stream."""
    subprocess.call([sys.executable, "-m", "benchmarks.demand", "--events", str(events)], stdout=subprocess.DEVNULL)
    path = RESULTS_DIR / "demand.json"
    return json.loads(path.read_text()) if path.exists() else {}


def stack_settings(stack: Stack) -> Settings:
    return Settings(
        nats_url=stack.nats.url,
        redis_url=stack.redis.url,
        subject_prefix=SUBJECTS.prefix,
        vast_api_url=f"http://127.0.0.1:{stack.ports['vast']}",
        vast_api_key=SecretStr(stack.api_key),
        clock_speed=stack.plan.speed,
        clock_sim_epoch=stack.sim_epoch,
        clock_wall_epoch_s=stack.wall_epoch_s,
    )


async def sample(js: Any, http: httpx.AsyncClient, stack: Stack, stream: str, started: float) -> dict[str, Any]:
    info = await js.stream_info(stream)
    demand_m = parse_metrics((await http.get(f"http://127.0.0.1:{stack.ports['demand']}/metrics")).text)
    fleet_tasks = await js.consumer_info(stream, "fleet-tasks")
    demand_tasks = await js.consumer_info(stream, "demand-tasks")
    return {
        "wall_s": round(time.monotonic() - started, 1),
        "stream_messages": info.state.messages,
        "task_events": demand_tasks.delivered.consumer_seq + demand_tasks.num_pending,
        "demand_applied": metric_total(demand_m, "fleetpilot_demand_task_events_total"),
        "fleet_acked": fleet_tasks.ack_floor.consumer_seq,
        "demand_lag": demand_tasks.num_pending + demand_tasks.num_ack_pending,
        "fleet_lag": fleet_tasks.num_pending + fleet_tasks.num_ack_pending,
    }


async def launch(js: Any, instances: int, now: Any) -> None:
    # 25 per command: the provisioner rents a whole command from one offer search (64 offers by default)
    for offset in range(0, instances, LAUNCH_BATCH):
        command = LaunchInstances(
            occurred_at=now,
            source="bench-operator",
            idempotency_key=f"load-{uuid.uuid4().hex[:12]}",
            requested_by="operator",
            count=min(LAUNCH_BATCH, instances - offset),
            launch_priority="normal",
            reason="operator_request",
        )
        await js.publish(
            SUBJECTS.provision_command("launch"),
            command.model_dump_json().encode(),
            headers={"Nats-Msg-Id": command.event_id},
            stream=COMMANDS.name(SUBJECTS),
        )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="fleetpilot-stack-load-"))
    scenario_path = workdir / "market.json"
    scenario_path.write_text(big_market(args.instances).model_dump_json())
    scale = args.events_per_h / (EVENTS_PER_TASK * 60 * STEADY_MEAN_ARRIVALS_PER_MIN)
    budget = args.instances * 1.0 + 50
    plan = StackPlan(
        TRACES_DIR / "steady.csv", 0, args.trace_minutes, scale, args.speed, 3600.0, budget, args.instances
    )
    env = {name: {"FLEETPILOT_PROVISIONER_RECONCILE_INTERVAL_S": "120"} for name in ("provisioner",)}
    stack = Stack(plan, workdir, process_env=env, vast_scenario=scenario_path)
    samples: list[dict[str, Any]] = []
    try:
        await asyncio.to_thread(stack.start)
        nc = await nats.connect(stack.nats.url)
        js = nc.jetstream()
        http = httpx.AsyncClient(timeout=10.0)
        vast = f"http://127.0.0.1:{stack.ports['vast']}"
        await launch(js, args.instances, stack.now())
        # rent first: the trace starts once most of the fleet is running
        ramp_started = time.monotonic()
        while time.monotonic() - ramp_started < args.ramp_limit_s:
            ledger = (await http.get(f"{vast}/_sim/ledger")).json()
            if ledger["live_instances"] >= args.instances * 0.95:
                break
            await asyncio.sleep(1.0)
        ramp_s = round(time.monotonic() - ramp_started, 1)
        replayer = Replayer(
            stack_settings(stack),
            stack_settings(stack).make_clock(),
            window_of(list(load_trace(plan.trace).arrivals_per_min), 0, args.trace_minutes, scale),
            instance_poll_s=INSTANCE_POLL_S,
        )
        await replayer.start()
        started = time.monotonic()
        stream = DEMAND.name(SUBJECTS)
        replay_wall_s = args.trace_minutes * 60 / args.speed
        while time.monotonic() - started < replay_wall_s:
            await asyncio.sleep(SAMPLE_S)
            samples.append(await sample(js, http, stack, stream, started))
            print(json.dumps(samples[-1]), flush=True)
        await replayer.close()
        # then until both have caught up: a bounded lag drains, a stack that cannot keep up does not
        drain_started = time.monotonic()
        while time.monotonic() - drain_started < args.drain_limit_s:
            if samples[-1]["demand_lag"] == 0 and samples[-1]["fleet_lag"] == 0:
                break
            await asyncio.sleep(SAMPLE_S)
            samples.append(await sample(js, http, stack, stream, started))
            print(json.dumps(samples[-1]), flush=True)
        drain_s = round(time.monotonic() - drain_started, 1)
        wall_s = time.monotonic() - started
        ledger = (await http.get(f"{vast}/_sim/ledger")).json()
        decider_m = parse_metrics((await http.get(f"http://127.0.0.1:{stack.ports['decider']}/metrics")).text)
        runs = metric_total(decider_m, "fleetpilot_decider_run_duration_seconds_count")
        run_sum_s = metric_total(decider_m, "fleetpilot_decider_run_duration_seconds_sum")
        rss = {name: peak_rss_mb(p.pid) for name, p in stack.processes.items()}
        rss["nats-server"] = peak_rss_mb(stack.nats.process.pid) if stack.nats.process else None
        rss["redis-server"] = peak_rss_mb(stack.redis.process.pid) if stack.redis.process else None
        await http.aclose()
        await nc.close()
        last = samples[-1] if samples else {}
        published = int(last.get("task_events", 0))
        replay = [x for x in samples if x["wall_s"] <= replay_wall_s] or samples

        def per_sim_h(key: str) -> float:
            """A sustained rate during the replay, in events per simulated hour."""
            first, end = replay[0], replay[-1]
            span_s = end["wall_s"] - first["wall_s"]
            return round((end[key] - first[key]) / span_s * 3600 / args.speed) if span_s > 0 else 0.0

        return {
            "instances_requested": args.instances,
            "instances_live_peak": ledger["peak_instances"],
            "ramp_wall_s": ramp_s,
            "speed": args.speed,
            "trace_minutes": args.trace_minutes,
            "target_events_per_sim_h": args.events_per_h,
            "replay_wall_s": round(replay_wall_s, 1),
            "total_wall_s": round(wall_s, 1),
            "task_events_published": published,
            "published_per_sim_h": per_sim_h("task_events"),
            "demand_applied_per_sim_h": per_sim_h("demand_applied"),
            "fleet_acked_per_sim_h": per_sim_h("fleet_acked"),
            "fleet_acked": last.get("fleet_acked"),
            "demand_applied": last.get("demand_applied"),
            "caught_up_wall_s_after_replay": drain_s if last.get("demand_lag") == last.get("fleet_lag") == 0 else None,
            "demand_lag_max": max((s["demand_lag"] for s in samples), default=None),
            "demand_lag_at_replay_end": replay[-1]["demand_lag"],
            "demand_lag_end": last.get("demand_lag"),
            "fleet_lag_max": max((s["fleet_lag"] for s in samples), default=None),
            "fleet_lag_at_replay_end": replay[-1]["fleet_lag"],
            "fleet_lag_end": last.get("fleet_lag"),
            "decider_runs": runs,
            "decider_run_mean_s": round(run_sum_s / runs, 3) if runs else None,
            "peak_rss_mb": rss,
            "crashed": stack.crashed(),
            "samples": samples,
        }
    finally:
        await asyncio.to_thread(stack.close)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--events-per-h", type=float, default=100_000, help="task events per simulated hour")
    parser.add_argument("--speed", type=float, default=60.0, help="simulated seconds per wall second")
    parser.add_argument("--trace-minutes", type=int, default=60)
    parser.add_argument("--ramp-limit-s", type=float, default=240.0, help="wall seconds to wait for the fleet")
    parser.add_argument("--drain-limit-s", type=float, default=120.0, help="wall seconds to wait for catch-up")
    # the same million events as benchmarks.demand alone: its result file is shared, so it must stay the run
    parser.add_argument("--reference-events", type=int, default=1_000_000, help="for benchmarks.demand")
    args = parser.parse_args()
    reference = demand_reference(args.reference_events)
    result = asyncio.run(run(args))
    result["reference_demand_alone"] = {k: reference.get(k) for k in ("events", "events_per_s", "peak_rss_mb",
                                                                       "raw_nats_events_per_s")}  # fmt: skip
    # what a rate measured at `speed` means on the real clock, where 100,000 events an hour is ~28 a second
    for key in ("demand_applied_per_sim_h", "fleet_acked_per_sim_h"):
        result[key.replace("_per_sim_h", "_real_clock_headroom")] = round(
            result[key] * args.speed / args.events_per_h, 1
        )
    path = write_result(NAME, result)
    rows = [(k, v) for k, v in result.items() if k != "samples"]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
