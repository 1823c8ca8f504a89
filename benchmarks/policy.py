"""`python -m benchmarks.policy`: every family of demand under every policy, train and test seeds apart.

Each family (sim/world/families.py) is generated on train seeds and on test seeds; every trace is replayed under
FleetPilot's policy and every baseline, in the benchmark's market with the trace's seed as the world's seed (so
launch luck differs per trace too), and scored against the clairvoyant lower bound and, on test seeds, the
achievable clairvoyant run. Per family and split: mean objective ÷ bound for each policy, predictive ÷ the
clairvoyant run, predictive ÷ the best baseline on each trace (mean and worst), and the traces on which a
policy ran out of offers or had launches refused. Apart from the baselines, the hindsight reference (target
tracking with its knobs picked per trace from the outcome) and predictive ÷ it. On test seeds, two lower bounds:
the fluid one (bound.py) and the whole-machine one (bound_milp.py, HiGHS' dual bound after 15 s); the gap split
divides the hindsight reference by the higher of the two. The policy's fitted constants are copied beside the
figures.

Default (what `make bench` runs): 2-day traces (the weekly family 7), train seeds 100-101 and test seeds
200-202, the traces replayed in parallel, one process per CPU (`--workers N`, `--backend ray`). `--full`: every
train (100-104) and test (200-209) seed, what the README reports. `--bundled`: the seven bundled traces and the
week's replay speed (bench-results/policy_bundled.json). `--draws K`: every trace in K draws of its world
(predictive and the baselines): how often a trace's verdict against the best baseline is the world's luck
(bench-results/policy_draws.json).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.common import write_result
from sim.vast.scenario import Scenario
from sim.world.bound_milp import integer_bound
from sim.world.engine import Engine
from sim.world.evaluate import (
    BASELINES,
    CLAIRVOYANT,
    CLAIRVOYANT_RUN,
    CLAIRVOYANT_RUN_LEVERS,
    CLAIRVOYANT_WHOLE,
    POLICY_FACTORIES,
    REFERENCES,
    TARGET_TRACKING_HINDSIGHT,
    bound_for,
    clairvoyant_run_for,
    evaluate,
    evaluate_clairvoyant_plan,
)
from sim.world.families import FAMILIES, TEST_SEEDS, TRAIN_SEEDS, generate
from sim.world.fitted import FITTED_CONSTANTS
from sim.world.make_traces import bundled_trace_paths
from sim.world.model import WorldConfig
from sim.world.objective import ObjectiveConfig
from sim.world.parallel import BACKENDS, Backend, BackendUnavailable, Progress, default_workers, run_all
from sim.world.trace import Trace, load_trace

NAME = "policy"
BUNDLED_NAME = "policy_bundled"
SCENARIO = Path(__file__).resolve().parent.parent / "sim" / "world" / "scenarios" / "bench.yaml"
# FleetPilot's policy and the baselines; its variants with vast's other levers have their own table (--levers)
LEVERS = ("predictive-on-demand", "predictive-park", "predictive-bids", "predictive-levers", "predictive-standby")
ON_DEMAND = LEVERS[0]  # what each lever is measured against: the policy renting on-demand only
SIMULATED = tuple(p for p in POLICY_FACTORIES if p not in LEVERS[1:])
LEVERS_NAME = "policy_levers"
# the levers' value rests on two rates vast does not publish (sim/vast/README.md): how often a stopped GPU is rented
# by someone else, and how other renters bid. `--what-if` reruns the levers table in a market that differs from the
# bench scenario's guesses in one of them, to show how much of each figure is the guess
WHAT_IF: dict[str, dict[str, Any]] = {
    "rarely-taken": {"stop_start": {"gpu_taken_per_stopped_h": 0.005}},
    "calm-bids": {"bids": {"share_bounds": {"min": 0.3, "max": 0.8}, "volatility_per_h": 0.03}},
}
PLAN_MAX_MINUTES = 2 * 24 * 60  # the plan follower scans the fleet per launch: run it on the short traces


class _Idle:
    name = "engine-only"
    decision_interval_s = 60.0

    def decide(self, view: object) -> list[object]:
        return []


def _trace_record(trace: Trace, scenario: Scenario, console: Console) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for policy in (*SIMULATED, CLAIRVOYANT):
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


def bundled(only: list[str] | None, console: Console) -> int:
    """The seven bundled traces (the table in sim/world/README.md), and the week's replay speed."""
    scenario = Scenario.load(SCENARIO)
    paths = [p for p in bundled_trace_paths() if not only or p.stem in only]
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
            if r["kind"] == "lower_bound":
                continue  # a number, not a fleet: it has no waits, machines or launches
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
        summary["week_sim_wall_s"] = {p: results[p]["sim_wall_s"] for p in (*SIMULATED, CLAIRVOYANT)}
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
        BUNDLED_NAME,
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


# --- families of demand, train and test ---------------------------------------------------------------------

DEFAULT_DAYS = 2  # two days: the second has a yesterday to plan from; a weekly trace needs its week
FAMILY_DAYS = {"weekly": 7}
DEFAULT_TRAIN_SEEDS = TRAIN_SEEDS[:2]
DEFAULT_TEST_SEEDS = TEST_SEEDS[:3]
PREDICTIVE = "predictive"
# the whole-machine bound on test seeds: HiGHS' dual bound after this long (valid whenever it stops)
WHOLE_MACHINE_BOUND_LIMIT_S = 15.0


def _record(evaluation: Any) -> dict[str, Any]:
    r = evaluation.as_dict()
    keep = ("kind", "objective_usd", "cost_usd", "delay_cost_usd", "wait_p95_min", "launches", "wasted_launches",
            "peak_instances", "launches_refused", "sim_wall_s", "warnings", "limits", "guardrail_verdict_rules",
            "work_bound_usd", "lp_converged", "hindsight_knobs")  # fmt: skip
    return {key: r[key] for key in keep if key in r}


def _limited(record: dict[str, Any]) -> bool:
    """Did the market or a guardrail hold this run back (offers ran out, launches refused)?"""
    return bool(record.get("launches_refused")) or bool(record.get("warnings"))


def _family_trace(family: str, seed: int, days: int, with_run: bool, scenario: Scenario) -> dict[str, Any]:
    trace = generate(family, seed, days)
    world_scenario = scenario.model_copy(update={"seed": seed})
    results: dict[str, dict[str, Any]] = {}
    for policy in (*SIMULATED, *REFERENCES, CLAIRVOYANT):
        results[policy] = _record(evaluate(trace, policy, world_scenario, seed))
    if with_run:
        results[CLAIRVOYANT_RUN] = _record(evaluate_clairvoyant_plan(trace, world_scenario, seed))
        whole = integer_bound(trace, world_scenario, time_limit_s=WHOLE_MACHINE_BOUND_LIMIT_S)
        results[CLAIRVOYANT_WHOLE] = {"kind": "lower_bound", "objective_usd": round(whole.objective_usd, 4),
                                      "milp_solved": whole.solved, "sim_wall_s": round(whole.wall_s, 2)}  # fmt: skip
    bound = results[CLAIRVOYANT]["objective_usd"]
    best = min(BASELINES, key=lambda p: results[p]["objective_usd"])
    predictive = results[PREDICTIVE]["objective_usd"]
    record: dict[str, Any] = {
        "trace": trace.name,
        "days": days,
        "tasks": trace.total_tasks,
        "peak_machines": round(trace.peak_tasks_per_h / 120.0, 1),
        "results": results,
        "ratio_to_bound": {
            p: round(results[p]["objective_usd"] / bound, 4) for p in results if results[p].get("kind") != "lower_bound"
        },
        "best_baseline": best,
        "predictive_vs_best_baseline": round(predictive / results[best]["objective_usd"], 4),
        # the fixable gap: predictive ÷ the best fixed-rule autoscaler with hindsight (a reference, not a baseline)
        "predictive_vs_hindsight": round(predictive / results[TARGET_TRACKING_HINDSIGHT]["objective_usd"], 4),
        "limited": sorted(p for p, r in results.items() if _limited(r)),
    }
    if with_run:
        record["predictive_vs_clairvoyant_run"] = round(predictive / results[CLAIRVOYANT_RUN]["objective_usd"], 4)
        # both bounds hold: the gap split divides by the higher (the fluid one, unless whole machines bind)
        tighter = max(bound, results[CLAIRVOYANT_WHOLE]["objective_usd"])
        hindsight = results[TARGET_TRACKING_HINDSIGHT]["objective_usd"]
        record["whole_machine_vs_fluid_bound"] = round(results[CLAIRVOYANT_WHOLE]["objective_usd"] / bound, 4)
        record["hindsight_vs_tighter_bound"] = round(hindsight / tighter, 4)
    return record


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else float("nan")


def _geomean(values: list[float]) -> float:
    return round(math.exp(sum(math.log(v) for v in values) / len(values)), 4) if values else float("nan")


def _family_summary(traces: list[dict[str, Any]]) -> dict[str, Any]:
    policies = list(traces[0]["ratio_to_bound"])
    summary: dict[str, Any] = {
        "seeds": len(traces),
        "mean_ratio_to_bound": {p: _mean([t["ratio_to_bound"][p] for t in traces]) for p in policies},
        "predictive_vs_best_baseline_mean": _mean([t["predictive_vs_best_baseline"] for t in traces]),
        "predictive_vs_best_baseline_geomean": _geomean([t["predictive_vs_best_baseline"] for t in traces]),
        "traces_worse_than_best_baseline": sum(1 for t in traces if t["predictive_vs_best_baseline"] > 1.0),
        "predictive_vs_best_baseline_worst": max(t["predictive_vs_best_baseline"] for t in traces),
        "predictive_vs_hindsight_mean": _mean([t["predictive_vs_hindsight"] for t in traces]),
        "best_baselines": dict(Counter(t["best_baseline"] for t in traces).most_common()),
        "limited_runs": dict(Counter(p for t in traces for p in t["limited"]).most_common()),
    }
    # the best baseline of the family: the one with the lowest mean objective over its seeds
    means = {p: _mean([t["results"][p]["objective_usd"] for t in traces]) for p in BASELINES}
    best = min(means, key=lambda p: means[p])
    summary["best_baseline_of_family"] = best
    summary["predictive_vs_best_baseline_of_family"] = round(
        _mean([t["results"][PREDICTIVE]["objective_usd"] for t in traces]) / means[best], 4
    )
    if all("predictive_vs_clairvoyant_run" in t for t in traces):
        summary["predictive_vs_clairvoyant_run_mean"] = _mean([t["predictive_vs_clairvoyant_run"] for t in traces])
        summary["whole_machine_vs_fluid_bound_mean"] = _mean([t["whole_machine_vs_fluid_bound"] for t in traces])
        # the gap split (issue): the value of information against the tighter bound, and the fixable gap
        summary["hindsight_vs_tighter_bound_mean"] = _mean([t["hindsight_vs_tighter_bound"] for t in traces])
    return summary


def _split_table(split: str, summaries: dict[str, dict[str, Any]]) -> Table:
    table = Table(title=f"{split} seeds: mean objective ÷ clairvoyant lower bound (1.00 would be optimal); "
                        "references (not runnable: they read the outcome or the future) after the bar")  # fmt: skip
    table.add_column("family")
    table.add_column("seeds", justify="right")
    for policy in SIMULATED:
        table.add_column(policy, justify="right")
    # references apart from the policies a user could run: they read the trace's outcome or its future
    table.add_column("| reference: tt hindsight", justify="right")
    table.add_column("pred ÷ hindsight", justify="right")
    with_run = any(CLAIRVOYANT_RUN in s["mean_ratio_to_bound"] for s in summaries.values())
    if with_run:
        table.add_column("clairv. run", justify="right")
        table.add_column("pred ÷ run", justify="right")
        table.add_column("whole-machine ÷ fluid bound", justify="right")
        table.add_column("hindsight ÷ tighter bound", justify="right")
    table.add_column("pred ÷ best baseline (which)", justify="right")
    table.add_column("per trace mean / worst", justify="right")
    table.add_column("held back (offers, refusals)", justify="left")
    for family, summary in summaries.items():
        ratios = summary["mean_ratio_to_bound"]
        hindsight = [f"{ratios[TARGET_TRACKING_HINDSIGHT]:.2f}", f"{summary['predictive_vs_hindsight_mean']:.2f}"]
        row = [family, str(summary["seeds"]), *[f"{ratios[p]:.2f}" for p in SIMULATED], *hindsight]
        if with_run:
            row += [f"{ratios.get(CLAIRVOYANT_RUN, float('nan')):.2f}",
                    f"{summary.get('predictive_vs_clairvoyant_run_mean', float('nan')):.2f}",
                    f"{summary.get('whole_machine_vs_fluid_bound_mean', float('nan')):.2f}",
                    f"{summary.get('hindsight_vs_tighter_bound_mean', float('nan')):.2f}"]  # fmt: skip
        row += [
            f"{summary['predictive_vs_best_baseline_of_family']:.2f} ({summary['best_baseline_of_family']})",
            f"{summary['predictive_vs_best_baseline_mean']:.2f} / {summary['predictive_vs_best_baseline_worst']:.2f}",
            ", ".join(f"{p} {n}" for p, n in summary["limited_runs"].items()) or "none",
        ]
        table.add_row(*row)
    return table


def _overall(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, over families: geometric means to the bound and the run, and where predictive loses."""
    traces = sum(s["seeds"] for s in summaries.values())
    worse = sum(s["traces_worse_than_best_baseline"] for s in summaries.values())
    overall: dict[str, Any] = {
        # the issue's first target: predictive ÷ the best runnable baseline on each trace, geometric mean over the
        # seeds, then over families; and the share of single traces on which some baseline beats it
        "geomean_predictive_vs_best_baseline": _geomean(
            [s["predictive_vs_best_baseline_geomean"] for s in summaries.values()]
        ),
        "share_of_traces_worse_than_best_baseline": round(worse / traces, 4) if traces else float("nan"),
        # the value of information: the best fixed rule with hindsight ÷ the clairvoyant bound
        "geomean_hindsight_vs_bound": _geomean(
            [s["mean_ratio_to_bound"][TARGET_TRACKING_HINDSIGHT] for s in summaries.values()]
        ),
        "geomean_predictive_vs_bound": _geomean([s["mean_ratio_to_bound"][PREDICTIVE] for s in summaries.values()]),
        # the fixable gap (online-scaling notes): predictive ÷ the best fixed rule with hindsight
        "geomean_predictive_vs_hindsight": _geomean([s["predictive_vs_hindsight_mean"] for s in summaries.values()]),
        "families_predictive_above_0_9_of_best_baseline": sorted(
            f for f, s in summaries.items() if s["predictive_vs_best_baseline_of_family"] > 0.9
        ),
        "families_with_a_trace_where_a_baseline_beats_predictive": sorted(
            f for f, s in summaries.items() if s["predictive_vs_best_baseline_worst"] > 1.0
        ),
    }
    runs = [
        s["predictive_vs_clairvoyant_run_mean"] for s in summaries.values() if "predictive_vs_clairvoyant_run_mean" in s
    ]
    if runs and len(runs) == len(summaries):
        overall["geomean_predictive_vs_clairvoyant_run"] = _geomean(runs)
        overall["geomean_hindsight_vs_tighter_bound"] = _geomean(
            [s["hindsight_vs_tighter_bound_mean"] for s in summaries.values()]
        )
    return overall


def _progress(console: Console, label: str, jobs: Sequence[tuple[Any, ...]]) -> Progress:
    """A line per trace as it ends: its family, seed and days, and the wall time since the pool started."""

    def report(index: int, wall_s: float) -> None:
        family, seed, days, *_ = jobs[index]
        console.print(f"  {label} {family}-{seed} ({days} d): {wall_s:5.1f} s", highlight=False)

    return report


def families(
    names: list[str],
    train_seeds: Sequence[int],
    test_seeds: Sequence[int],
    days: int | None,
    console: Console,
    workers: int | None = None,
    backend: Backend = "process",
) -> int:
    scenario = Scenario.load(SCENARIO)
    splits: dict[str, Any] = {}
    for split, seeds, with_run in (("train", train_seeds, False), ("test", test_seeds, True)):
        jobs = [(family, seed, days or FAMILY_DAYS.get(family, DEFAULT_DAYS), with_run, scenario)
                for family in names for seed in seeds]  # fmt: skip
        if not jobs:
            continue
        records = run_all(_family_trace, jobs, workers, backend, _progress(console, split, jobs))
        traces: dict[str, list[dict[str, Any]]] = {}
        for (family, *_), record in zip(jobs, records, strict=True):
            traces.setdefault(family, []).append(record)
        summaries = {family: _family_summary(family_records) for family, family_records in traces.items()}
        console.print(_split_table(split, summaries))
        overall = _overall(summaries)
        console.print(f"{split}: {overall}", highlight=False)
        splits[split] = {"seeds": list(seeds), "families": summaries, "overall": overall, "traces": traces}
    fitted = [constant.as_dict() for constant in FITTED_CONSTANTS]
    console.print(f"fitted constants ({len(fitted)}): {fitted or 'none declared'}", highlight=False)
    objective = ObjectiveConfig()
    path = write_result(
        NAME,
        {
            "scenario": str(SCENARIO.relative_to(SCENARIO.parent.parent.parent.parent)),
            "world_seed": "each trace's own seed",
            "days": {family: days or FAMILY_DAYS.get(family, DEFAULT_DAYS) for family in names},
            "objective": {"grace_min": objective.grace_min, "delay_usd_per_task_h": objective.delay_usd_per_task_h},
            "policies": list(SIMULATED),
            "baselines": list(BASELINES),
            # read the trace's outcome: between the baselines and the bound, never "the best baseline"
            "references": list(REFERENCES),
            "splits": splits,
            "fitted_constants": fitted,
        },
    )
    console.print(f"wrote {path}")
    return 0


def _lever_record(family: str, seed: int, days: int, scenario: Scenario, with_runs: bool) -> dict[str, Any]:
    trace = generate(family, seed, days)
    world_scenario = scenario.model_copy(update={"seed": seed})
    results = {policy: evaluate(trace, policy, world_scenario, seed) for policy in LEVERS}
    # each policy against the clairvoyant that may do what it may: the levers bound (and run) for parking and bids
    references = {name: evaluate(trace, name, world_scenario, seed).objective_usd
                  for name in sorted({bound_for(p) for p in LEVERS})}  # fmt: skip
    if with_runs:
        references |= {name: evaluate(trace, name, world_scenario, seed).objective_usd
                       for name in sorted({clairvoyant_run_for(p) for p in LEVERS})}  # fmt: skip
    base = results[ON_DEMAND].objective_usd
    record: dict[str, Any] = {"trace": trace.name, "days": days,
                              "references_usd": {k: round(v, 2) for k, v in references.items()}}  # fmt: skip
    if with_runs:
        # what parking is worth to the plan follower that knows the future (it launches early enough that no
        # startup costs it a wait), beside the policy's own figure: a heuristic's, not the optimum with parking
        record["clairvoyant_run_park_vs_on_demand"] = round(
            references[CLAIRVOYANT_RUN_LEVERS] / references[CLAIRVOYANT_RUN], 4
        )
    for policy, evaluation in results.items():
        run = evaluation.run
        assert run is not None
        loading_h = run.machine_hours - run.producing_machine_hours
        produced_task_h = run.tasks_completed * WorldConfig().task_s / 3600.0
        bound = references[bound_for(policy)]
        record[policy] = {
            "objective_usd": round(evaluation.objective_usd, 2),
            "ratio_to_on_demand": round(evaluation.objective_usd / base, 4),
            "ratio_to_bound": round(evaluation.objective_usd / bound, 4) if bound > 0 else None,
            # machine-hours billed but not producing (startups, registration), per task-hour produced
            "loading_h_per_task_h": round(loading_h / produced_task_h, 4) if produced_task_h else None,
            **{key: evaluation.extra[key] for key in (
                "storage_cost_usd", "parks", "resumes", "resumes_gpu_taken", "failed_resumes_given_up",
                "failed_resumes_short", "failed_resumes_replaced_same_run", "failed_resume_wait_max_min",
                "outbid_pauses", "launches_refused")},
            "cost_usd": round(evaluation.cost_usd, 2),
            "delay_cost_usd": round(evaluation.delay_cost_usd, 2),
            "launches": evaluation.launches,
            "wasted_launches": evaluation.wasted_launches,
        }  # fmt: skip
        if with_runs:
            record[policy]["ratio_to_clairvoyant_run"] = round(
                evaluation.objective_usd / references[clairvoyant_run_for(policy)], 4
            )
    return record


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in change.items():
        nested = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = _merged(base[key], value) if nested else value
    return merged


def levers(
    names: list[str],
    seeds: Sequence[int],
    days: int | None,
    console: Console,
    with_runs: bool,
    what_if: str | None = None,
    workers: int | None = None,
    backend: Backend = "process",
) -> int:
    """Each of vast's levers alone and all together against FleetPilot's on-demand-only policy (issue targets:
    all three ≤ 0.75 × on-demand-only on the geometric mean over families, never worse on any family; loading
    machine-hours per produced task-hour at most half on diurnal and weekly), each also against the clairvoyant
    bound that may use the same levers."""
    scenario = Scenario.load(SCENARIO)
    if what_if is not None:
        scenario = Scenario.model_validate(_merged(scenario.model_dump(), WHAT_IF[what_if]))
    per_family: dict[str, Any] = {}
    table = Table(title="objective ÷ predictive-on-demand, geometric mean over seeds; ÷ its bound; "
                        "loading h per task-h")  # fmt: skip
    columns = ("family", "seeds", *LEVERS[1:], *(f"÷ bound {p}" for p in LEVERS),
               *(f"loading {p}" for p in LEVERS), "failed resumes: short / replaced same run",
               *(("clairvoyant run: park ÷ on-demand",) if with_runs else ()))  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "family" else "right")
    jobs = [(family, seed, days or FAMILY_DAYS.get(family, DEFAULT_DAYS), scenario, with_runs)
            for family in names for seed in seeds]  # fmt: skip
    all_records = run_all(_lever_record, jobs, workers, backend, _progress(console, "levers", jobs))
    for family in names:
        records = [record for (of_family, *_), record in zip(jobs, all_records, strict=True) if of_family == family]
        ratios = {p: _geomean([r[p]["ratio_to_on_demand"] for r in records]) for p in LEVERS[1:]}
        to_bound = {p: _mean([r[p]["ratio_to_bound"] for r in records if r[p]["ratio_to_bound"]]) for p in LEVERS}
        loading = {p: _mean([r[p]["loading_h_per_task_h"] for r in records if r[p]["loading_h_per_task_h"]])
                   for p in LEVERS}  # fmt: skip
        clairvoyant_park = _geomean([r["clairvoyant_run_park_vs_on_demand"] for r in records]) if with_runs else None
        short = sum(r[p]["failed_resumes_short"] for r in records for p in LEVERS)
        replaced = sum(r[p]["failed_resumes_replaced_same_run"] for r in records for p in LEVERS)
        per_family[family] = {"seeds": list(seeds), "ratio_to_on_demand": ratios, "mean_ratio_to_bound": to_bound,
                              "loading_h_per_task_h": loading, "worst_ratio_to_on_demand":
                              {p: max(r[p]["ratio_to_on_demand"] for r in records) for p in LEVERS[1:]},
                              "failed_resumes_short": short, "failed_resumes_replaced_same_run": replaced,
                              "clairvoyant_run_park_vs_on_demand": clairvoyant_park,
                              "traces": records}  # fmt: skip
        table.add_row(family, str(len(seeds)), *(f"{ratios[p]:.2f}" for p in LEVERS[1:]),
                      *(f"{to_bound[p]:.2f}" for p in LEVERS), *(f"{loading[p]:.3f}" for p in LEVERS),
                      f"{short} / {replaced}", *((f"{clairvoyant_park:.2f}",) if with_runs else ()))  # fmt: skip
    console.print(table)
    overall = {p: round(_geomean([f["ratio_to_on_demand"][p] for f in per_family.values()]), 4) for p in LEVERS[1:]}
    console.print(f"geometric mean over families, ÷ predictive-on-demand: {overall}", highlight=False)
    path = write_result(
        LEVERS_NAME if what_if is None else f"{LEVERS_NAME}_{what_if.replace('-', '_')}",
        {
            "scenario": str(SCENARIO.relative_to(SCENARIO.parent.parent.parent.parent)),
            "what_if": None if what_if is None else {"name": what_if, "changes": WHAT_IF[what_if]},
            "policies": list(LEVERS),
            "seeds": list(seeds),
            "families": per_family,
            "geomean_ratio_to_on_demand": overall,
            "fitted_constants": [constant.as_dict() for constant in FITTED_CONSTANTS],
        },
    )
    console.print(f"wrote {path}")
    return 0


# --- the same traces in other draws of the world --------------------------------------------------------------

DRAWS_NAME = "policy_draws"
# the k-th extra draw of a trace's world takes the trace's seed plus k times this (the families' seeds are < 1000)
WORLD_DRAW_STRIDE = 1000


def _draw_record(family: str, seed: int, days: int, draw: int, scenario: Scenario) -> dict[str, float]:
    """Predictive's and every baseline's objective on one trace, in draw `draw` of its world (0: the trace's own
    seed, what the family table uses): same demand, another market, other startups and failures."""
    trace = generate(family, seed, days)
    world_seed = seed + draw * WORLD_DRAW_STRIDE
    world_scenario = scenario.model_copy(update={"seed": world_seed})
    return {p: round(evaluate(trace, p, world_scenario, world_seed).objective_usd, 4) for p in (PREDICTIVE, *BASELINES)}


def _vs_best(objectives: dict[str, float]) -> float:
    return objectives[PREDICTIVE] / min(objectives[p] for p in BASELINES)


def draws(
    names: list[str],
    seeds: Sequence[int],
    count: int,
    days: int | None,
    console: Console,
    workers: int | None = None,
    backend: Backend = "process",
) -> int:
    """How much of "worse than the best baseline on this trace" is the world's luck: every trace replayed in
    `count` draws of its world (predictive and the baselines only). Per family: traces worse in each draw, the
    traces whose verdict differs between draws, the spread of predictive ÷ best baseline between draws (root
    mean square of the log change against draw 0), and the verdict on each policy's objective averaged over the
    draws."""
    if count < 2:
        raise ValueError(f"draws={count}: at least 2 (the first is the family table's own)")
    scenario = Scenario.load(SCENARIO)
    jobs = [(family, seed, days or FAMILY_DAYS.get(family, DEFAULT_DAYS), draw, scenario)
            for family in names for seed in seeds for draw in range(count)]  # fmt: skip
    results = run_all(_draw_record, jobs, workers, backend, _progress(console, "draws", jobs))
    by_trace: dict[tuple[str, int], list[dict[str, float]]] = {}
    for (family, seed, *_), objectives in zip(jobs, results, strict=True):
        by_trace.setdefault((family, seed), []).append(objectives)
    ratios_of = {key: [_vs_best(objectives) for objectives in runs] for key, runs in by_trace.items()}
    table = Table(title=f"predictive ÷ best baseline per trace, in {count} draws of each trace's world")
    for column in ("family", "traces", "worse, per draw", "verdict differs", "rms log change",
                   "worse on the draws' mean", "geomean on the draws' mean"):  # fmt: skip
        table.add_column(column, justify="left" if column == "family" else "right")
    per_family: dict[str, Any] = {}
    for family in names:
        traces = {seed: by_trace[(family, seed)] for seed in seeds}
        ratios = {seed: ratios_of[(family, seed)] for seed in seeds}
        mean_ratio = {seed: _vs_best({p: sum(o[p] for o in runs) / count for p in runs[0]})
                      for seed, runs in traces.items()}  # fmt: skip
        changes = [math.log(r[d] / r[0]) for r in ratios.values() for d in range(1, count)]
        record = {
            "seeds": list(seeds),
            "worse_per_draw": [sum(1 for r in ratios.values() if r[d] > 1.0) for d in range(count)],
            "verdict_differs": sum(1 for r in ratios.values() if len({x > 1.0 for x in r}) > 1),
            "rms_log_change": round(math.sqrt(sum(c * c for c in changes) / len(changes)), 4),
            "worse_on_mean": sum(1 for r in mean_ratio.values() if r > 1.0),
            "geomean_on_mean": _geomean(list(mean_ratio.values())),
            "traces": {
                str(seed): {"objectives": runs, "predictive_vs_best_baseline": [round(x, 4) for x in ratios[seed]]}
                for seed, runs in traces.items()
            },
        }
        per_family[family] = record
        table.add_row(family, str(len(seeds)), " / ".join(map(str, record["worse_per_draw"])),
                      str(record["verdict_differs"]), f"{record['rms_log_change']:.3f}",
                      str(record["worse_on_mean"]), f"{record['geomean_on_mean']:.3f}")  # fmt: skip
    console.print(table)
    all_changes = [math.log(r[d] / r[0]) for r in ratios_of.values() for d in range(1, count)]
    overall = {
        "traces": len(by_trace),
        "worse_per_draw": [sum(f["worse_per_draw"][d] for f in per_family.values()) for d in range(count)],
        "verdict_differs": sum(f["verdict_differs"] for f in per_family.values()),
        "rms_log_change": round(math.sqrt(sum(c * c for c in all_changes) / len(all_changes)), 4),
        "worse_on_mean": sum(f["worse_on_mean"] for f in per_family.values()),
        "geomean_on_mean": _geomean([f["geomean_on_mean"] for f in per_family.values()]),
    }
    console.print(f"over families: {overall}", highlight=False)
    path = write_result(
        DRAWS_NAME,
        {
            "scenario": str(SCENARIO.relative_to(SCENARIO.parent.parent.parent.parent)),
            "world_seeds": f"each trace's seed + k × {WORLD_DRAW_STRIDE}, k = 0..{count - 1}",
            "baselines": list(BASELINES),
            "families": per_family,
            "overall": overall,
        },
    )
    console.print(f"wrote {path}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="every train and test seed (the README's figures)")
    parser.add_argument("--family", action="append", choices=list(FAMILIES), help="only these families")
    parser.add_argument("--split", choices=["train", "test"], help="only this split")
    parser.add_argument("--days", type=int, help="days per trace for every family (default 2, weekly 7)")
    parser.add_argument("--bundled", action="store_true", help="the bundled traces and the week's speed instead")
    parser.add_argument("--trace", action="append", help="with --bundled: only these bundled traces (by name)")
    parser.add_argument(
        "--levers", action="store_true", help="parking and bids against on-demand only, on test seeds (--full: all)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="with --levers or --draws: these seeds")
    parser.add_argument(
        "--with-runs", action="store_true", help="with --levers: also the clairvoyant runs (the slowest part)"
    )
    parser.add_argument("--what-if", choices=list(WHAT_IF), help="with --levers: a market unlike the guesses")
    parser.add_argument(
        "--draws", type=int, help="each trace in this many draws of its world: how much of a verdict is luck"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        help="traces replayed at once (default: one per CPU, %(default)s here; 1: in this process)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="process",
                        help="process (default) or ray (optional extra, imported only when chosen)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: at least 1")
    console = Console(width=max(Console().width, 220))
    if args.bundled:
        return bundled(args.trace, console)
    if args.levers:
        seeds = TEST_SEEDS if args.full else DEFAULT_TEST_SEEDS
        seeds = args.seeds or seeds
        return _parallel(console, lambda: levers(args.family or list(FAMILIES), seeds, args.days, console,
                                                 args.with_runs, args.what_if, args.workers, args.backend))  # fmt: skip
    train = TRAIN_SEEDS if args.full else DEFAULT_TRAIN_SEEDS
    test = TEST_SEEDS if args.full else DEFAULT_TEST_SEEDS
    if args.draws is not None:
        if args.draws < 2:
            parser.error(f"--draws {args.draws}: at least 2")
        seeds = args.seeds or (train if args.split == "train" else test)
        return _parallel(console, lambda: draws(args.family or list(FAMILIES), seeds, args.draws, args.days, console,
                                                args.workers, args.backend))  # fmt: skip
    if args.split == "train":
        test = range(0)
    elif args.split == "test":
        train = range(0)
    return _parallel(console, lambda: families(args.family or list(FAMILIES), train, test, args.days, console,
                                               args.workers, args.backend))  # fmt: skip


def _parallel(console: Console, benchmark: Callable[[], int]) -> int:
    """The benchmark, or one line and exit status 2 when the chosen backend cannot run here."""
    try:
        return benchmark()
    except BackendUnavailable as error:
        console.print(f"error: {error}", highlight=False)
        return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
