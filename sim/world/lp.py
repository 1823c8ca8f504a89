"""The bound's linear relaxation, min cᵀx subject to Ax = b and 0 ≤ x ≤ ub, solved by HiGHS through scipy.

It only has to find good dual prices: the clairvoyant bound is evaluated exactly from them afterwards
(sim/world/bound.py), so a failed solve loosens the bound to the plain work bound, never breaks it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeWarning, linprog
from scipy.sparse import csr_array

# HiGHS' interior point without its crossover to a vertex: the bound's relaxations are dual-degenerate, and the
# interior (central) duals spread a price over the minutes that tie, as the hand-written solver's did; a vertex's
# duals put it all on one of them, which leaves the bound's value the same but books unavoidable waiting as price
# (tests/world/test_bound.py, the cold start)
HIGHS_METHOD = "highs-ipm"
HIGHS_OPTIONS = {"run_crossover": "off"}


@dataclass(frozen=True)
class LinearProgram:
    """A sparse equality-form LP: A given as its nonzeros (row, column, value)."""

    c: np.ndarray  # (n,)
    rows: np.ndarray  # (nnz,) row of each nonzero
    cols: np.ndarray  # (nnz,)
    vals: np.ndarray  # (nnz,)
    b: np.ndarray  # (m,)
    ub: np.ndarray  # (n,), np.inf where unbounded


@dataclass(frozen=True)
class LPSolution:
    x: np.ndarray
    y: np.ndarray  # equality duals: ∂(optimal objective)/∂b
    iterations: int
    primal_objective: float
    converged: bool


def solve(problem: LinearProgram) -> LPSolution:
    """The optimum and its equality duals; zeros (and converged False) when HiGHS finds none."""
    a_eq = csr_array((problem.vals, (problem.rows, problem.cols)), shape=(len(problem.b), len(problem.c)))
    bounds = np.column_stack([np.zeros(len(problem.c)), problem.ub])
    with warnings.catch_warnings():
        # scipy passes options it does not name (run_crossover) to HiGHS verbatim, and says so each call
        warnings.simplefilter("ignore", OptimizeWarning)
        result = linprog(
            problem.c, A_eq=a_eq, b_eq=problem.b, bounds=bounds, method=HIGHS_METHOD, options=HIGHS_OPTIONS
        )
    if result.x is None:
        return LPSolution(np.zeros(len(problem.c)), np.zeros(len(problem.b)), int(result.nit), 0.0, False)
    return LPSolution(result.x, result.eqlin.marginals, int(result.nit), float(result.fun), result.status == 0)
