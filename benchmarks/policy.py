"""`python -m benchmarks.policy`: every bundled trace under every policy, scored against the clairvoyant bound.

For each trace: each policy's objective (cost + delay cost), its ratio to the clairvoyant lower bound, and
predictive ÷ reactive. Speed is reported beside references measured in the same run: the week replayed
with a policy that never acts (the engine alone) and the bound's own computation. Diagnostics: the predictive
policy with GPU preferences treated as preferences, and (short traces) an achievable clairvoyant run that
follows the bound's plan, which brackets the true optimum between the two (see sim/world/README.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.common import write_result
from sim.vast.scenario import Scenario
from sim.world.engine import Engine
from sim.world.evaluate import POLICIES, evaluate, evaluate_clairvoyant_plan
from sim.world.make_traces import bundled_trace_paths
from sim.world.model import WorldConfig
from sim.world.objective import ObjectiveConfig
from sim.world.trace import Trace, load_trace

NAME = "policy"
SCENARIO = Path(__file__).resolve().parent.parent / "sim" / "world" / "scenarios" / "bench.yaml"
SIMULATED = tuple(p for p in POLICIES if p != "clairvoyant")
PLAN_MAX_MINUTES = 2 * 24 * 60  # the plan follower scans the fleet per launch: run it on the short traces


class _Idle:
    name = "engine-only"
    decision_interval_s = 60.0

    def decide(self, view: object) -> list[object]:
        return []


def _trace_record(trace: Trace, scenario: Scenario, console: Console) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for policy in POLICIES:
        started = time.perf_counter()
        results[policy] = evaluate(trace, policy, scenario, scenario.seed).as_dict()
        console.print(f"  {trace.name:8s} {policy:16s} {time.perf_counter() - started:6.1f} s", highlight=False)
    fallback = evaluate(trace, "predictive", scenario, scenario.seed, WorldConfig(gpu_preference="fallback"))
    diagnostics: dict[str, Any] = {"predictive_gpu_fallback": fallback.as_dict()}
    bound = results["clairvoyant"]["objective_usd"]
    if trace.minutes <= PLAN_MAX_MINUTES:
        plan = evaluate_clairvoyant_plan(trace, scenario, scenario.seed).as_dict()
        diagnostics["clairvoyant_plan"] = plan
        diagnostics["clairvoyant_plan_ratio_to_bound"] = round(plan["objective_usd"] / bound, 4)
    return {
        "minutes": trace.minutes,
        "tasks": trace.total_tasks,
        "peak_tasks_per_h": trace.peak_tasks_per_h,
        "results": results,
        "ratio_to_clairvoyant": {p: round(results[p]["objective_usd"] / bound, 4) for p in SIMULATED},
        "predictive_vs_reactive": round(
            results["predictive"]["objective_usd"] / results["reactive"]["objective_usd"], 4
        ),
        "diagnostics": diagnostics,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", action="append", help="only these bundled traces (by name); default all")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 170))
    scenario = Scenario.load(SCENARIO)
    paths = [p for p in bundled_trace_paths() if not args.trace or p.stem in args.trace]
    traces: dict[str, dict[str, Any]] = {}
    for path in paths:
        traces[path.stem] = _trace_record(load_trace(path), scenario, console)

    week = load_trace(SCENARIO.parent.parent.parent / "traces" / "week.csv")
    started = time.perf_counter()
    engine_only = Engine(week, _Idle(), scenario, scenario.seed).run()  # type: ignore[arg-type]
    engine_only_wall_s = time.perf_counter() - started

    table = Table(title="objective ÷ clairvoyant lower bound (lower is better; 1.00 would be optimal)")
    table.add_column("trace")
    for policy in SIMULATED:
        table.add_column(policy, justify="right")
    table.add_column("predictive ÷ reactive", justify="right")
    table.add_column("clairvoyant $", justify="right")
    table.add_column("predictive (gpu fallback) ÷ bound", justify="right")
    table.add_column("clairvoyant plan ÷ bound", justify="right")
    for name, record in traces.items():
        bound = record["results"]["clairvoyant"]["objective_usd"]
        fallback = record["diagnostics"]["predictive_gpu_fallback"]["objective_usd"] / bound
        table.add_row(
            name,
            *[f"{record['ratio_to_clairvoyant'][p]:.2f}" for p in SIMULATED],
            f"{record['predictive_vs_reactive']:.2f}",
            f"{bound:,.0f}",
            f"{fallback:.2f}",
            f"{record['diagnostics'].get('clairvoyant_plan_ratio_to_bound', float('nan')):.2f}",
        )
    console.print(table)
    detail = Table(title="what each policy did (objective $ = cost + delay; waits in minutes)")
    for column in ("trace", "policy", "objective $", "cost $", "delay $", "p95 wait", "machine-h", "idle-h",
                   "launches", "wasted", "peak", "sim wall s"):  # fmt: skip
        detail.add_column(column, justify="left" if column in ("trace", "policy") else "right")
    for name, record in traces.items():
        for policy, r in record["results"].items():
            detail.add_row(
                name, policy, f"{r['objective_usd']:,.0f}", f"{r['cost_usd']:,.0f}", f"{r['delay_cost_usd']:,.0f}",
                f"{r['wait_p95_min']:.1f}", f"{r['machine_hours']:,.0f}", f"{r['idle_machine_hours']:,.0f}",
                str(r["launches"]), str(r["wasted_launches"]), str(r["peak_instances"]), f"{r['sim_wall_s']:.1f}",
            )  # fmt: skip
    console.print(detail)

    summary: dict[str, Any] = {
        "engine_only_week_wall_s": round(engine_only_wall_s, 3),
        "engine_only_week_cpu_s": round(engine_only.sim_cpu_s, 3),
    }
    if traces:
        summary["max_ratio_to_clairvoyant"] = {
            p: max(t["ratio_to_clairvoyant"][p] for t in traces.values()) for p in SIMULATED
        }
        summary["max_predictive_vs_reactive"] = max(t["predictive_vs_reactive"] for t in traces.values())
    if "week" in traces:
        results = traces["week"]["results"]
        summary["week_sim_wall_s"] = {p: results[p]["sim_wall_s"] for p in POLICIES}
        summary["week_sim_cpu_s"] = {p: results[p].get("sim_cpu_s") for p in SIMULATED}
        summary["week_peak_instances"] = {p: results[p]["peak_instances"] for p in SIMULATED}
        fallback = traces["week"]["diagnostics"]["predictive_gpu_fallback"]
        summary["week_sim_wall_s"]["predictive_gpu_fallback"] = fallback["sim_wall_s"]
        summary["week_peak_instances"]["predictive_gpu_fallback"] = fallback["peak_instances"]
        summary["week_sim_cpu_s"]["predictive_gpu_fallback"] = fallback.get("sim_cpu_s")
        for key in ("policy_ms_per_decision_p50", "policy_ms_per_decision_p99", "fleet_snapshot_ms_p50",
                    "fleet_snapshot_ms_p99", "decide_ms_per_tick_p50", "decide_ms_per_tick_p99",
                    "policy_ms_at_1000_instances_p50", "policy_ms_at_1000_instances_p99",
                    "decider_runs_at_1000_instances"):  # fmt: skip
            summary[f"week_predictive_{key}"] = results["predictive"].get(key)
            summary[f"week_predictive_gpu_fallback_{key}"] = fallback.get(key)
    console.print(summary, highlight=False)
    objective = ObjectiveConfig()
    path = write_result(
        NAME,
        {
            "scenario": str(SCENARIO.relative_to(SCENARIO.parent.parent.parent.parent)),
            "seed": scenario.seed,
            "objective": {"grace_min": objective.grace_min, "delay_usd_per_task_h": objective.delay_usd_per_task_h},
            "traces": traces,
            "summary": summary,
        },
    )
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
