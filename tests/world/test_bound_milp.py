"""The whole-machine bound (bound_milp.py): never above what any policy reaches; above the fluid bound where a
fleet must rent whole machines for a trickle or serve a spike."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.world.bound import clairvoyant_bound
from sim.world.bound_milp import integer_bound
from sim.world.engine import Engine
from sim.world.evaluate import POLICY_FACTORIES, default_guardrails
from sim.world.model import WorldConfig
from sim.world.objective import ObjectiveConfig
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Hold, RandomPolicy

SIMULATED = [name for name in POLICY_FACTORIES if name != "predictive"]
TRACES = [
    Trace.of([20] * 120 + [120] * 45 + [20] * 75, "spike"),
    Trace.of(([3] * 10 + [0] * 50) * 6, "trickle"),
    Trace.of([0] * 90 + [60] * 60 + [0] * 90, "late"),
]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=st.sampled_from(TRACES),
    seed=st.integers(0, 50),
    fates=st.tuples(*[st.sampled_from([0.0, 0.2])] * 4),
    billed_from=st.sampled_from(["created", "running"]),
    initial=st.sampled_from([None, 0, 2]),
    grace_min=st.sampled_from([0.0, 15.0]),
    delay=st.sampled_from([0.1, 1.0]),
    levers=st.booleans(),
)
def test_no_policy_beats_the_whole_machine_bound(
    trace, seed, fates, billed_from, initial, grace_min, delay, levers
) -> None:
    stuck, exit_error, offline, slow = fates
    scenario = quiet_scenario(
        seed=seed,
        market=[{"gpu_model": "RTX 4090", "count": 8}, {"gpu_model": "RTX 3090", "count": 4}],
        startup={"startup_s": {"min": 1800, "max": 3600}},
        fates={"stuck_loading": stuck, "exit_error": exit_error, "offline_later": offline, "slow": slow,
               "offline_after_s": {"min": 600, "max": 7200}},
    )  # fmt: skip
    world = WorldConfig(billed_from=billed_from, initial_machines=initial, drain_max_s=4 * 3600)
    objective = ObjectiveConfig(grace_min=grace_min, delay_usd_per_task_h=delay)
    bound = integer_bound(trace, scenario, world, objective, levers=levers, time_limit_s=10)
    policies = [POLICY_FACTORIES[name](default_guardrails(world, scenario, trace)) for name in SIMULATED]
    policies += [Hold(), RandomPolicy(seed), RandomPolicy(seed + 1)]
    for policy in policies:
        result = Engine(trace, policy, scenario, seed, world, objective).run()
        assert bound.objective_usd <= result.objective_usd * (1 + 1e-6) + 1e-6, (policy.name, bound, result)
    assert bound.objective_usd <= bound.primal_usd * (1 + 1e-6) + 1e-6


def test_whole_machines_make_a_trickle_and_a_spike_cost_more_than_the_fluid_bound_says() -> None:
    for trace in TRACES[:2]:
        fluid = clairvoyant_bound(trace, quiet_scenario()).objective_usd
        whole = integer_bound(trace, quiet_scenario(), time_limit_s=20)
        assert whole.objective_usd > fluid * 1.03, (trace.name, fluid, whole)
        assert whole.plan_peak_machines >= 1


def test_a_step_that_needs_no_machine_costs_nothing() -> None:
    empty = integer_bound(Trace.of([0] * 120, "empty"), quiet_scenario(), WorldConfig(initial_machines=0))
    assert empty.solved and empty.objective_usd == 0.0
