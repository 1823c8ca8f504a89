"""The clairvoyant bound and run with vast's levers: parking and bids may go below the on-demand bound, never
below the levers bound."""

from __future__ import annotations

import random
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.vast.scenario import Scenario
from sim.world.bound import build_problem, capacity_part, clairvoyant_bound
from sim.world.engine import Engine
from sim.world.evaluate import (
    CLAIRVOYANT_LEVERS,
    LEVER_POLICIES,
    POLICY_FACTORIES,
    bound_for,
    default_guardrails,
    evaluate,
    evaluate_clairvoyant_plan,
)
from sim.world.model import Action, Launch, MachineState, Remove, Resume, WorldConfig, WorldView
from sim.world.objective import ObjectiveConfig
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Scripted
from tests.world.test_bound import small_traces

# demand that comes back: an hour of ten RTX 4090s' work, three hours of nothing, the same hour again
TWO_PEAKS = Trace.of([20] * 60 + [0] * 180 + [20] * 60, "two peaks")


class ParkAndBid:
    """Parks producers as soon as the queue is empty, resumes every parked machine once tasks wait, and launches
    interruptible machines bidding exactly min_bid: the levers used as hard as a policy can."""

    name = "park-and-bid"
    decision_interval_s = 120.0

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def decide(self, view: WorldView) -> Sequence[Action]:
        actions: list[Action] = []
        producing = [m for m in view.machines if m.state is MachineState.PRODUCING]
        parked = [m for m in view.machines if m.state is MachineState.PARKED]
        if view.pending_tasks >= 1:
            actions += [Resume(m.instance_id) for m in parked]
            count = self.rng.randint(0, 3)
            actions.append(Launch(count, interruptible=count, bid_markup=0.0))
        else:
            actions += [Remove(m.instance_id, "stop") for m in producing[1:] if self.rng.random() < 0.5]
        if self.rng.random() < 0.05:  # now and then a parked machine is given back for good
            actions += [Remove(m.instance_id, "destroy") for m in parked[:1]]
        return actions


def lever_scenario(seed: int, storage_usd_per_gb_month: float, gpu_taken_per_h: float) -> Scenario:
    return quiet_scenario(
        seed=seed,
        market=[{"gpu_model": "RTX 4090", "count": 12}, {"gpu_model": "RTX 5090", "count": 4},
                {"gpu_model": "RTX 3090", "count": 6}],
        startup={"startup_s": {"min": 1800, "max": 3600}},
        billing={"storage_usd_per_gb_month": storage_usd_per_gb_month},
        stop_start={"gpu_taken_per_stopped_h": gpu_taken_per_h},
        # other renters' bids walk around min_bid, so bids at min_bid are paused now and then
        bids={"start_share": {"min": 0.4, "max": 0.6}, "volatility_per_h": 0.5},
        fates={"stuck_loading": 0.05, "exit_error": 0.05, "offline_later": 0.05, "slow": 0.1},
    )  # fmt: skip


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=small_traces(),
    seed=st.integers(0, 1000),
    storage=st.sampled_from([0.15, 5.0]),
    gpu_taken_per_h=st.sampled_from([0.0, 0.5]),
    billed_from=st.sampled_from(["created", "running"]),
    initial=st.sampled_from([None, 0, 2]),
    delay=st.sampled_from([0.02, 0.1, 1.0]),
)
def test_no_policy_with_levers_beats_the_levers_bound(
    trace, seed, storage, gpu_taken_per_h, billed_from, initial, delay
) -> None:
    scenario = lever_scenario(seed, storage, gpu_taken_per_h)
    world = WorldConfig(billed_from=billed_from, initial_machines=initial, drain_max_s=4 * 3600)
    objective = ObjectiveConfig(delay_usd_per_task_h=delay)
    levers = clairvoyant_bound(trace, scenario, world, objective, levers=True).objective_usd
    on_demand = clairvoyant_bound(trace, scenario, world, objective).objective_usd
    assert levers <= on_demand * (1 + 1e-9)
    guardrails = default_guardrails(world, scenario, trace)
    policies = [POLICY_FACTORIES[name](guardrails) for name in LEVER_POLICIES]
    policies += [ParkAndBid(seed), ParkAndBid(seed + 1)]
    for policy in policies:
        result = Engine(trace, policy, scenario, seed, world, objective).run()
        assert levers <= result.objective_usd * (1 + 1e-9) + 1e-9, (policy.name, levers, result.objective_usd)


def test_parking_alone_lowers_the_bound_when_demand_comes_back() -> None:
    # min_bid at the on-demand price: bids buy nothing here, so the gap is parking's alone
    scenario = quiet_scenario(bids={"min_bid_share": 1.0})
    on_demand = clairvoyant_bound(TWO_PEAKS, scenario)
    levers = clairvoyant_bound(TWO_PEAKS, scenario, levers=True)
    # each of the ten machines is either held for three idle hours or started again (an hour or more, billed);
    # parked, it pays its disk (~$0.01/h) and a registration's ten minutes
    assert levers.objective_usd < on_demand.objective_usd - 2.0
    # ... and a run that parks does go below the on-demand bound: that bound is no floor for the levers
    run = evaluate_clairvoyant_plan(TWO_PEAKS, scenario, levers=True)
    assert levers.objective_usd <= run.objective_usd < on_demand.objective_usd


def test_a_parked_level_pays_its_disk_and_a_registration_to_produce_again() -> None:
    scenario = quiet_scenario(bids={"min_bid_share": 1.0})
    world, objective = WorldConfig(), ObjectiveConfig()
    on_demand = build_problem(TWO_PEAKS, scenario, world, objective)
    levers = build_problem(TWO_PEAKS, scenario, world, objective, levers=True)
    assert levers.tiers == on_demand.tiers  # no bid discount at min_bid_share 1
    # prices that pay for capacity only during the two peaks: parking through the gap beats holding and restarting
    prices = levers.arrivals_per_min * 0 + on_demand.usd_per_task_min * 4
    prices[60:240] = 0.0
    assert capacity_part(levers, prices) < capacity_part(on_demand, prices)
    disk_and_registration = levers.parked_usd_per_task_per_h * 3 + levers.resume_usd_per_task_per_h
    assert disk_and_registration < on_demand.startup_usd_per_task_per_h


def test_the_clairvoyant_run_with_levers_parks_and_resumes() -> None:
    scenario = quiet_scenario(bids={"min_bid_share": 1.0})
    plain = evaluate(TWO_PEAKS, "clairvoyant-run", scenario)
    parking = evaluate(TWO_PEAKS, "clairvoyant-run-levers", scenario)
    assert plain.extra["parks"] == 0
    assert parking.extra["parks"] > 0 and parking.extra["resumes"] > 0
    assert parking.objective_usd <= plain.objective_usd
    assert parking.policy == "clairvoyant-run-levers"


def test_a_policy_with_levers_is_scored_against_the_levers_bound() -> None:
    assert bound_for("predictive-levers") == CLAIRVOYANT_LEVERS
    assert bound_for("predictive") == CLAIRVOYANT_LEVERS  # the default parks
    assert bound_for("predictive-on-demand") == "clairvoyant"
    bound = evaluate(TWO_PEAKS, CLAIRVOYANT_LEVERS, quiet_scenario())
    assert (bound.policy, bound.kind) == (CLAIRVOYANT_LEVERS, "lower_bound")


def test_a_bid_paused_at_creation_loads_its_whole_startup_whatever_its_owner_does() -> None:
    # another renter bids above min_bid at first: the bid is created paused. Its owner tries to start it, and once
    # it wins and loads, stops it and starts it again, over and over. None of it may shorten its startup, or a
    # fresh machine could produce before the bound's first minute
    producing_at_s: list[float] = []

    def script(view: WorldView) -> Sequence[Action]:
        if view.now_s == 60.0:
            return [Launch(1, interruptible=1, bid_markup=0.0)]
        if view.now_s == 1200.0:
            engine.bid_levels.set_share("RTX 4090", 0.3)  # the other renter leaves: the bid wins
        actions: list[Action] = []
        for machine in view.machines:
            if machine.state is MachineState.PARKED:
                actions.append(Resume(machine.instance_id))
            elif machine.state is MachineState.RESUMING and view.now_s in (1800.0, 3000.0):
                actions.append(Remove(machine.instance_id, "stop"))
            elif machine.state is MachineState.PRODUCING:
                producing_at_s.append(view.now_s)
        return actions

    scenario = quiet_scenario(bids={"start_share": {"min": 0.6, "max": 0.6}, "volatility_per_h": 0.0})
    engine = Engine(Trace.of([0] * 300, "idle"), Scripted(script), scenario, 0, WorldConfig(initial_machines=0))
    engine.run()
    assert producing_at_s, "the machine never produced"
    assert min(producing_at_s) >= 60.0 + 3600 + engine.world.registration_s
    assert engine.outbid_pauses == 1 and engine.parks == 2
