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

from benchmarks.common import RESULTS_DIR, write_result
from shared.contract import LaunchInstances
from shared.streams import COMMANDS, DEMAND
from sim.stack import TRACES_DIR, Stack, StackPlan
from sim.vast.scenario import Scenario
from tests.faults.harness import SUBJECTS, metric_total, parse_metrics

NAME = "stack_load"
STEADY_MEAN_ARRIVALS_PER_MIN = 39.95  # sim/traces/steady.csv
EVENTS_PER_TASK = 3  # submitted, started, completed


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


async def launch(js: Any, instances: int, now: Any) -> None:
    for offset in range(0, instances, 100):
        command = LaunchInstances(
            occurred_at=now,
            source="bench-operator",
            idempotency_key=f"load-{uuid.uuid4().hex[:12]}",
            requested_by="operator",
            count=min(100, instances - offset),
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
        stack.start_jobs()
        started = time.monotonic()
        stream = DEMAND.name(SUBJECTS)
        while stack.processes["jobs"].poll() is None and time.monotonic() - started < args.limit_s:
            await asyncio.sleep(2.0)
            info = await js.stream_info(stream)
            demand_m = parse_metrics((await http.get(f"http://127.0.0.1:{stack.ports['demand']}/metrics")).text)
            fleet_tasks = await js.consumer_info(stream, "fleet-tasks")
            demand_tasks = await js.consumer_info(stream, "demand-tasks")
            samples.append(
                {
                    "wall_s": round(time.monotonic() - started, 1),
                    "stream_messages": info.state.messages,
                    "demand_applied": metric_total(demand_m, "fleetpilot_demand_task_events_total"),
                    "demand_lag": demand_tasks.num_pending + demand_tasks.num_ack_pending,
                    "fleet_lag": fleet_tasks.num_pending + fleet_tasks.num_ack_pending,
                }
            )
            print(json.dumps(samples[-1]), flush=True)
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
        published = int(last.get("stream_messages", 0))
        return {
            "instances_requested": args.instances,
            "instances_live_peak": ledger["peak_instances"],
            "ramp_wall_s": ramp_s,
            "speed": args.speed,
            "trace_minutes": args.trace_minutes,
            "target_events_per_sim_h": args.events_per_h,
            "replay_wall_s": round(wall_s, 1),
            "replay_finished": stack.processes["jobs"].poll() == 0,
            "events_in_stream": published,
            "published_events_per_wall_s": round(published / wall_s, 1) if wall_s else 0.0,
            "demand_applied": last.get("demand_applied"),
            "demand_lag_max": max((s["demand_lag"] for s in samples), default=None),
            "demand_lag_end": last.get("demand_lag"),
            "fleet_lag_max": max((s["fleet_lag"] for s in samples), default=None),
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
    parser.add_argument("--limit-s", type=float, default=300.0, help="wall seconds for the replay")
    parser.add_argument("--reference-events", type=int, default=200_000, help="for benchmarks.demand")
    args = parser.parse_args()
    reference = demand_reference(args.reference_events)
    result = asyncio.run(run(args))
    result["reference_demand_alone"] = {k: reference.get(k) for k in ("events", "events_per_s", "peak_rss_mb",
                                                                       "raw_nats_events_per_s")}  # fmt: skip
    sim_h = result["replay_wall_s"] * args.speed / 3600
    result["demand_applied_per_sim_h"] = round((result["demand_applied"] or 0) / sim_h) if sim_h else None
    path = write_result(NAME, result)
    rows = [(k, v) for k, v in result.items() if k != "samples"]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
