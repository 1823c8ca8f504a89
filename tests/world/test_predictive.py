"""FleetPilot's predictive policy in the world: the real demand, fleet and decider cores driven at simulated time."""

from __future__ import annotations

from sim.world.bound import clairvoyant_bound
from sim.world.engine import Engine
from sim.world.evaluate import evaluate
from sim.world.model import Launch, MachineState, WorldConfig
from sim.world.policies.predictive import PredictiveAdapter, default_guardrails
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario, timing
from tests.world.test_baselines import BURST, BURST_MINUTE


def adapter(world: WorldConfig, **scenario: object) -> PredictiveAdapter:
    return PredictiveAdapter(default_guardrails(world, quiet_scenario(**scenario)))


def test_a_short_burst_on_a_served_fleet_buys_no_machine() -> None:
    world = WorldConfig(initial_machines=2)
    policy = adapter(world)
    launched_at: list[float] = []
    decide = policy.decide

    def recording(view):  # type: ignore[no-untyped-def]
        actions = decide(view)
        launched_at.extend(view.now_s for a in actions if isinstance(a, Launch))
        return actions

    policy.decide = recording  # type: ignore[method-assign]
    result = Engine(BURST, policy, quiet_scenario(), 0, world).run()
    assert not [t for t in launched_at if BURST_MINUTE * 60 <= t <= (BURST_MINUTE + 30) * 60]
    assert result.delay_cost_usd == 0
    assert policy.runs > 0


def test_the_cores_see_the_world_as_it_is() -> None:
    trace = Trace.of([40 if 60 <= m < 300 else 10 for m in range(420)], "step up")
    world = WorldConfig()
    policy = adapter(world)
    engine = Engine(trace, policy, quiet_scenario(), 0, world)
    result = engine.run()
    assert result.launches > 0  # four hours at 2400 tasks/h on a fleet sized for 600 is sustained demand
    snapshot = policy.fleet.snapshot(policy.fleet_now())
    world_ids = {m.instance_id for m in engine.machines.values()}
    assert {line.instance_id for line in snapshot.instances} <= world_ids | set(policy.reported)
    world_producing = sum(1 for m in engine.machines.values() if m.state is MachineState.PRODUCING)
    assert snapshot.producing_instances <= world_producing
    assert policy.signal is not None and policy.signal.sustained_arrival_rate_per_h > 0


def test_the_bound_holds_for_the_predictive_policy_too() -> None:
    scenario = quiet_scenario(fates={"stuck_loading": 0.1, "exit_error": 0.1, "offline_later": 0.1, "slow": 0.1})
    world = WorldConfig(drain_max_s=4 * 3600)
    for trace in (
        Trace.of([40 if 60 <= m < 300 else 10 for m in range(360)], "step"),
        Trace.of([5] * 60 + [60] * 20 + [5] * 100, "spike"),
        Trace.of([30 - m // 10 for m in range(300)], "decline"),
    ):
        bound = clairvoyant_bound(trace, scenario, world).objective_usd
        run = Engine(trace, PredictiveAdapter(default_guardrails(world, scenario)), scenario, 1, world).run()
        assert bound <= run.objective_usd, trace.name


def test_a_fixed_seed_gives_the_same_predictive_run() -> None:
    scenario = quiet_scenario(seed=5, fates={"stuck_loading": 0.2, "exit_error": 0.2, "offline_later": 0.2})
    trace = Trace.of([30 if 60 <= m < 200 else 6 for m in range(300)], "step")

    def record() -> dict[str, object]:
        out = evaluate(trace, "predictive", scenario, 5).as_dict()
        return {k: v for k, v in out.items() if not timing(k)}

    assert record() == record()
