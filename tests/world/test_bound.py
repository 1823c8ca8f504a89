"""The clairvoyant bound: never above what any policy reaches, and not trivially low."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.world import lp
from sim.world.bound import bound_value, build_problem, capacity_part, clairvoyant_bound, task_part
from sim.world.engine import Engine
from sim.world.evaluate import POLICY_FACTORIES, default_guardrails, evaluate, evaluate_clairvoyant_plan
from sim.world.model import WorldConfig
from sim.world.objective import ObjectiveConfig
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Hold, RandomPolicy

SIMULATED = [name for name in POLICY_FACTORIES if name != "predictive"]


def test_the_lp_solver_finds_a_known_optimum() -> None:
    # min x0 + 2 x1 subject to x0 + x1 >= 3 (slack x2), x0 <= 2: optimum 4 at (2, 1), dual price 2
    problem = lp.LinearProgram(
        c=np.array([1.0, 2.0, 0.0]),
        rows=np.array([0, 0, 0]),
        cols=np.array([0, 1, 2]),
        vals=np.array([1.0, 1.0, -1.0]),
        b=np.array([3.0]),
        ub=np.array([2.0, np.inf, np.inf]),
    )
    solution = lp.solve(problem)
    assert solution.converged
    assert solution.primal_objective == pytest.approx(4.0, rel=1e-6)
    assert solution.x[:2] == pytest.approx([2.0, 1.0], abs=1e-6)
    assert solution.y[0] == pytest.approx(2.0, rel=1e-6)


def test_an_infeasible_relaxation_gives_zero_prices_not_an_error() -> None:
    # x0 = -1 with x0 >= 0: no solution; the bound then falls back to the work bound
    problem = lp.LinearProgram(
        c=np.array([1.0]), rows=np.array([0]), cols=np.array([0]), vals=np.array([1.0]), b=np.array([-1.0]),
        ub=np.array([np.inf]),
    )  # fmt: skip
    solution = lp.solve(problem)
    assert not solution.converged
    assert solution.y.tolist() == [0.0]


def test_at_the_cheapest_price_per_task_the_bound_is_the_work_alone() -> None:
    trace = Trace.of([10] * 60 + [0] * 60, "hour")
    problem = build_problem(trace, quiet_scenario(), WorldConfig(), ObjectiveConfig())
    price = problem.usd_per_task_min
    prices = np.full(problem.horizon_min, price)
    assert task_part(problem, prices) == (pytest.approx(600 * price), 0.0)
    assert capacity_part(problem, prices) == 0.0
    # pricing capacity above its holding cost for the whole horizon is penalised by the capacity part
    assert capacity_part(problem, prices * 3) < 0


def test_waiting_nobody_can_avoid_is_in_the_bound() -> None:
    # 300 tasks at t=0, no machine yet, and none can produce before 1 h + 10 min registration
    trace = Trace.of([300] + [0] * 59, "cold start")
    bound = clairvoyant_bound(trace, quiet_scenario(), WorldConfig(initial_machines=0))
    unavoidable_min = 60 + 10 - 15 - 1  # first possible start, less the grace and the arrival minute
    assert bound.delay_cost_usd >= 300 * 0.10 * unavoidable_min / 60 * 0.99
    assert bound.objective_usd > bound.work_bound_usd


def small_traces() -> st.SearchStrategy[Trace]:
    def shape(base: int, burst_at: int, burst: int, minutes: int, ramp: int) -> Trace:
        rates = [base + ramp * m // minutes + (burst if burst_at <= m < burst_at + 10 else 0) for m in range(minutes)]
        return Trace.of(rates, "random")

    return st.builds(
        shape,
        base=st.integers(0, 8),
        burst_at=st.integers(0, 150),
        burst=st.integers(0, 60),
        minutes=st.integers(30, 240),
        ramp=st.integers(0, 10),
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=small_traces(),
    seed=st.integers(0, 1000),
    fates=st.tuples(*[st.sampled_from([0.0, 0.1, 0.2])] * 4),
    startup_min_s=st.sampled_from([1800, 3600]),
    billed_from=st.sampled_from(["created", "running"]),
    initial=st.sampled_from([None, 0, 2]),
    grace_min=st.sampled_from([0.0, 15.0]),
    delay=st.sampled_from([0.02, 0.1, 1.0]),
)
def test_no_policy_beats_the_clairvoyant_bound(
    trace, seed, fates, startup_min_s, billed_from, initial, grace_min, delay
) -> None:
    stuck, exit_error, offline, slow = fates
    scenario = quiet_scenario(
        seed=seed,
        market=[
            {"gpu_model": "RTX 4090", "count": 12},
            {"gpu_model": "RTX 5090", "count": 4},
            {"gpu_model": "RTX 3090", "count": 6},
        ],
        startup={"startup_s": {"min": startup_min_s, "max": startup_min_s * 2}},
        fates={"stuck_loading": stuck, "exit_error": exit_error, "offline_later": offline, "slow": slow,
               "offline_after_s": {"min": 600, "max": 7200}},
    )  # fmt: skip
    world = WorldConfig(billed_from=billed_from, initial_machines=initial, drain_max_s=4 * 3600)
    objective = ObjectiveConfig(grace_min=grace_min, delay_usd_per_task_h=delay)
    bound = clairvoyant_bound(trace, scenario, world, objective).objective_usd
    policies = [POLICY_FACTORIES[name](default_guardrails(world, scenario, trace)) for name in SIMULATED]
    policies += [Hold(), RandomPolicy(seed), RandomPolicy(seed + 1)]
    for policy in policies:
        result = Engine(trace, policy, scenario, seed, world, objective).run()
        assert bound <= result.objective_usd * (1 + 1e-9) + 1e-9, (policy.name, bound, result.objective_usd)


def test_the_bound_is_below_every_policy_on_a_bundled_shape() -> None:
    spike = Trace.of([20] * 120 + [120] * 45 + [20] * 75, "spike")
    bound = evaluate(spike, "clairvoyant", quiet_scenario())
    assert bound.kind == "lower_bound"
    for name in SIMULATED:
        assert bound.objective_usd <= evaluate(spike, name, quiet_scenario()).objective_usd
    # prices from the relaxation must do better than the plain work bound on a trace with a spike
    assert bound.objective_usd > bound.extra["work_bound_usd"]


def test_bound_value_never_goes_below_zero_prices() -> None:
    trace = Trace.of([5] * 30, "short")
    problem = build_problem(trace, quiet_scenario(), WorldConfig(), ObjectiveConfig())
    negative = np.full(problem.horizon_min, -1.0)
    assert bound_value(problem, negative) == bound_value(problem, np.zeros(problem.horizon_min))


def test_an_achievable_clairvoyant_run_comes_close_to_the_bound_on_steady_demand() -> None:
    steady = Trace.of([20] * 360, "steady")  # 1200 tasks/h: ten RTX 4090s' work
    scenario = quiet_scenario()
    bound = evaluate(steady, "clairvoyant", scenario).objective_usd
    plan = evaluate_clairvoyant_plan(steady, scenario)
    assert bound <= plan.objective_usd <= 1.1 * bound
