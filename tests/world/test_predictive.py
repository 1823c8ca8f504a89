"""FleetPilot's predictive policy in the world: the real demand, fleet and decider cores driven at simulated time."""

from __future__ import annotations

from services.demand.records import IngestOutcome
from shared.contract import TaskEvent
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


def test_the_world_feeds_demand_through_task_events_and_it_learns_the_machines_real_pace() -> None:
    # every machine rented runs at half its catalog pace (the catalog says 120 tasks/h for an RTX 4090)
    scenario = quiet_scenario(fates={"stuck_loading": 0, "exit_error": 0, "offline_later": 0, "slow": 1.0,
                                     "slow_factor": {"min": 0.5, "max": 0.5}},
                              startup={"startup_s": {"min": 3600, "max": 3600}})  # fmt: skip
    world = WorldConfig(initial_machines=0)
    policy = PredictiveAdapter(default_guardrails(world, scenario))
    engine = Engine(Trace.of([10] * 300, "cold start at 600/h"), policy, scenario, 0, world)
    engine.run()
    assert policy.sampled_completions["RTX 4090"] > 100  # completions went in one by one, as task events
    signal = policy.demand.evaluate(policy.fleet_now()).signal
    assert signal.per_worker_throughput_tasks_per_h is not None
    assert 50 <= signal.per_worker_throughput_tasks_per_h <= 70
    # through demand's own duplicate check: an event seen is not counted twice (the adapter's last sequence number
    # may be an event only fleet saw, so the event is sent twice here)
    seen = TaskEvent(event_id=f"world-task-{policy.task_seq + 1}", occurred_at=policy.fleet_now(),
                     source="job-system", kind="completed", task_id="again", task_type="default")  # fmt: skip
    assert policy.demand.ingest(seen, policy.fleet_now()) is IngestOutcome.APPLIED
    assert policy.demand.ingest(seen, policy.fleet_now()) is IngestOutcome.DUPLICATE


def test_a_flash_crowd_that_lasts_hours_launches_at_the_first_decider_run_that_sees_it() -> None:
    crowd_minute = 120
    trace = Trace.of([10] * crowd_minute + [60] * 240 + [10] * 60, "a four-hour flash crowd")
    world = WorldConfig()
    policy = adapter(world)
    runs: list[tuple[float, int]] = []  # (when, machines launched) for every decider run
    decide = policy.decide

    def recording(view):  # type: ignore[no-untyped-def]
        before = policy.runs
        actions = decide(view)
        if policy.runs > before:
            runs.append((view.now_s, sum(a.count for a in actions if isinstance(a, Launch))))
        return actions

    policy.decide = recording  # type: ignore[method-assign]
    Engine(trace, policy, quiet_scenario(), 0, world).run()
    during = [(at_s, launched) for at_s, launched in runs if at_s > crowd_minute * 60]
    assert during[0][1] > 0, during[:3]  # the first run after the crowd began launched
    assert during[0][0] <= (crowd_minute + 3) * 60  # and came within minutes (demand's trigger, P1 debounce)


def test_guardrails_scaled_to_a_trace_keep_the_defaults_ratios() -> None:
    world, scenario = WorldConfig(), quiet_scenario()
    small = default_guardrails(world, scenario, Trace.of([10] * 120, "600/h"))  # 5 machines at its peak
    assert (small.max_instances, small.budget_usd_per_h, small.max_launches_per_h) == (30, 15.0, 30)  # the market
    big = default_guardrails(world, quiet_scenario(market=[{"gpu_model": "RTX 4090", "count": 500}]),
                             Trace.of([400] * 120, "24000/h"))  # fmt: skip
    # 200 catalog machines at its busiest hour: 1.5 times that, at the defaults' $20/h per 40 instances
    assert (big.max_instances, big.budget_usd_per_h, big.max_launches_per_h) == (300, 150.0, 300)
    assert default_guardrails(world, scenario).budget_usd_per_h == 30 * 1.2  # no trace: the cap binds first
