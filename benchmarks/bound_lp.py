"""`python -m benchmarks.bound_lp`: the clairvoyant bound's linear relaxation solved by HiGHS (scipy), the solver
the bound uses, beside the hand-written interior-point solver it replaced, on the same relaxations in the same run.

Per trace: each solver's best wall time over a few repeats, its LP objective, and the bound its dual prices give
(sim/world/bound.py evaluates the bound exactly from any prices, so the two may differ only where the duals do).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from rich.box import SIMPLE
from rich.console import Console
from rich.table import Table

from benchmarks import _staged_ipm
from benchmarks.common import write_result
from sim.vast.scenario import Scenario
from sim.world import lp
from sim.world.bound import BoundProblem, Relaxation, bound_from_duals, build_problem, relaxation_problem
from sim.world.families import generate
from sim.world.model import WorldConfig
from sim.world.objective import ObjectiveConfig

NAME = "bound_lp"
FAMILIES = ("diurnal", "flash-crowd", "batch")
SEED = 200  # the first test seed of the family tables
RELAXATION_ROWS_PER_STEP = 3  # the staged solver's block: the relaxation's three rows per time step
REPEATS = 3


def _timed(solve: Callable[[], lp.LPSolution]) -> tuple[lp.LPSolution, float]:
    best_s, solution = float("inf"), None
    for _ in range(REPEATS):
        start = time.perf_counter()
        solution = solve()
        best_s = min(best_s, time.perf_counter() - start)
    assert solution is not None
    return solution, best_s


def _solver_record(
    problem: BoundProblem, relaxation: Relaxation, solution: lp.LPSolution, wall_s: float
) -> dict[str, Any]:
    bound_usd, _, _ = bound_from_duals(problem, relaxation, solution)
    return {
        "wall_s": wall_s,
        "iterations": solution.iterations,
        "converged": solution.converged,
        "lp_objective_usd": solution.primal_objective * relaxation.objective_scale,
        "bound_usd": bound_usd,
    }


def compare(family: str, days: int, levers: bool) -> dict[str, Any]:
    trace = generate(family, SEED, days)
    problem = build_problem(trace, Scenario(), WorldConfig(), ObjectiveConfig(), levers)
    relaxation = relaxation_problem(problem)
    highs, highs_s = _timed(lambda: lp.solve(relaxation.lp))
    staged, staged_s = _timed(lambda: _staged_ipm.solve(relaxation.lp, RELAXATION_ROWS_PER_STEP))
    return {
        "trace": trace.name,
        "days": days,
        "levers": levers,
        "lp_columns": len(relaxation.lp.c),
        "highs": _solver_record(problem, relaxation, highs, highs_s),
        "staged_ipm": _solver_record(problem, relaxation, staged, staged_s),
        "staged_ipm_over_highs_wall": staged_s / highs_s,
    }


def print_table(records: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="bound LP: HiGHS vs the hand-written interior point (best of 3, same relaxation)", box=SIMPLE)
    table.add_column("trace", no_wrap=True)
    for column in ("levers", "HiGHS s", "IPM s", "IPM ÷ HiGHS", "bound $ HiGHS", "bound $ IPM"):
        table.add_column(column, justify="right")
    for r in records:
        table.add_row(
            f"{r['trace']} {r['days']}d",
            "yes" if r["levers"] else "no",
            f"{r['highs']['wall_s']:.3f}",
            f"{r['staged_ipm']['wall_s']:.3f}",
            f"{r['staged_ipm_over_highs_wall']:.1f}",
            f"{r['highs']['bound_usd']:,.2f}",
            f"{r['staged_ipm']['bound_usd']:,.2f}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, nargs="+", default=[1, 7], help="trace lengths in days")
    args = parser.parse_args()
    records = [compare(f, d, levers) for f in FAMILIES for d in args.days for levers in (False, True)]
    print_table(records, Console())
    path = write_result(NAME, {"records": records})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
