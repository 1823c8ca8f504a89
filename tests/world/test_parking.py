"""Parking in the world: vast's stop keeps a machine's disk (billed) and image, its start brings it back in
minutes, unless its GPU was rented meanwhile; the same scenario rules as the vast simulator's."""

from __future__ import annotations

import pytest

from sim.vast.scenario import Scenario
from sim.world.engine import Engine
from sim.world.evaluate import POLICY_FACTORIES, _predictive_with, default_guardrails
from sim.world.model import Launch, MachineState, Remove, Resume, WorldConfig
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Scripted

DISK_USD_PER_H = 0.15 * 50 / 730
QUIET_6H = Trace.of([0] * 360, "quiet")
RESTART_S, REGISTRATION_S, TASK_S = 120.0, 600.0, 240.0
PARK_AT, RESUME_AT = 600.0, 3 * 3600.0


def parking_script(states: dict[float, MachineState], launches_at: float | None = None):
    def script(view):
        machine = view.machines_by_id.get(1)
        if machine is not None:
            states[view.now_s] = machine.state
        if view.now_s == PARK_AT:
            return [Remove(1, "stop", "idle")]
        if view.now_s == RESUME_AT:
            return [Resume(1, "demand_back")]
        if launches_at is not None and view.now_s == launches_at:
            return [Launch(1)]
        return []

    return script


def run(script, scenario: Scenario | None = None):
    scenario = scenario or quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 1, "price_usd_per_h": {"min": 0.5, "max": 0.5}}]
    )
    return Engine(QUIET_6H, Scripted(script), scenario, 0, WorldConfig(initial_machines=1)).run()


def test_a_parked_machine_pays_its_disk_only_and_comes_back_in_minutes() -> None:
    states: dict[float, MachineState] = {}
    result = run(parking_script(states))
    parked_s = RESUME_AT - (PARK_AT + TASK_S)
    end_s = result.end_s
    gpu_s = (PARK_AT + TASK_S) + (end_s - RESUME_AT - RESTART_S)  # draining finishes its tasks; restart unbilled
    assert result.cost_usd == pytest.approx((0.5 * gpu_s + DISK_USD_PER_H * end_s) / 3600)
    assert result.storage_cost_usd == pytest.approx(DISK_USD_PER_H * end_s / 3600)
    assert parked_s > 0 and result.parks == 1 and result.resumes == 1 and result.resumes_gpu_taken == 0
    assert states[PARK_AT + 300] is MachineState.PARKED
    assert states[RESUME_AT + 60] is MachineState.RESUMING
    back_at = RESUME_AT + RESTART_S + REGISTRATION_S
    assert states[back_at - 60] is MachineState.RESUMING
    assert states[back_at + 60] is MachineState.PRODUCING


def test_a_parked_machine_stays_ours_the_market_does_not_rent_it_again() -> None:
    states: dict[float, MachineState] = {}
    result = run(parking_script(states, launches_at=3600.0))  # the only offer is the parked machine's
    assert result.launches == 0 and result.launches_refused == 1


def test_a_resume_whose_gpu_was_taken_waits_in_scheduling_until_given_up() -> None:
    states: dict[float, MachineState] = {}
    taken_for_good = quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 1, "price_usd_per_h": {"min": 0.5, "max": 0.5}}],
        stop_start={"gpu_taken_per_stopped_h": 1000.0, "gpu_free_after_s": None},
    )

    def script(view):
        actions = parking_script(states)(view)
        if view.now_s == RESUME_AT + 3600:
            actions = [Remove(1, "destroy", "gpu_taken")]
        return actions

    result = run(script, taken_for_good)
    assert result.resumes_gpu_taken == 1
    assert states[RESUME_AT + 3000] is MachineState.RESUMING  # never running: its GPU is someone else's
    assert RESUME_AT + 3660 not in states  # destroyed: gone from the view
    gpu_s = PARK_AT + TASK_S  # nothing after the park
    disk_s = RESUME_AT + 3600
    assert result.cost_usd == pytest.approx((0.5 * gpu_s + DISK_USD_PER_H * disk_s) / 3600)


def test_a_taken_gpu_freed_later_delays_the_resume() -> None:
    states: dict[float, MachineState] = {}
    freed_in_an_hour = quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 1, "price_usd_per_h": {"min": 0.5, "max": 0.5}}],
        stop_start={"gpu_taken_per_stopped_h": 1000.0, "gpu_free_after_s": {"min": 3600, "max": 3600}},
    )
    result = run(parking_script(states), freed_in_an_hour)
    back_at = RESUME_AT + 3600 + RESTART_S + REGISTRATION_S
    assert result.resumes_gpu_taken == 1
    assert states[back_at - 60] is MachineState.RESUMING
    assert states[back_at + 60] is MachineState.PRODUCING


def test_the_predictive_policy_parks_at_night_and_resumes_in_the_morning() -> None:
    """The decider's own policy, cores and guardrails in the world: a working day, a quiet night, a second day."""
    day = [20] * 8 * 60  # 1200 tasks/h: ten machines
    night = [1] * 8 * 60
    trace = Trace.of(day + night + day, "two-days")
    scenario = quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 40, "price_usd_per_h": {"min": 0.5, "max": 0.5}}]
    )
    world = WorldConfig()
    guardrails = default_guardrails(world, scenario, trace)
    policy = POLICY_FACTORIES["predictive-park"](guardrails)
    result = Engine(trace, policy, scenario, 0, world, guardrails=guardrails).run()
    assert result.parks >= 5  # the night's surplus kept, not given back
    assert result.resumes >= 5  # and started again for the second day
    assert result.resumes_gpu_taken == 0  # the quiet scenario never rents a stopped GPU to someone else
    assert result.storage_cost_usd > 0


def test_a_predictive_resume_that_finds_its_gpu_taken_is_replaced_within_the_decider_run_that_gives_up() -> None:
    """The issue's rule: a parked machine whose start fails is replaced within one decider run. Every GPU is taken
    for good here, so each morning resume waits until fleet fails it (gpu_taken) and the decider replaces it."""
    day = [20] * 8 * 60
    night = [1] * 8 * 60
    trace = Trace.of(day + night + day, "two-days")
    scenario = quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 40, "price_usd_per_h": {"min": 0.5, "max": 0.5}}],
        stop_start={"gpu_taken_per_stopped_h": 1000.0, "gpu_free_after_s": None},
    )
    world = WorldConfig()
    guardrails = default_guardrails(world, scenario, trace)
    # the policy planning on a waiting resume until fleet fails it, so the give-up leaves the fleet short
    trusting = _predictive_with("trusting", park=True, resume_gpu_wait_s=10 * 3600.0)(guardrails)
    run_result = Engine(trace, trusting, scenario, 0, world, guardrails=guardrails).run()
    assert run_result.resumes >= 5 and run_result.resumes_gpu_taken == run_result.resumes
    assert run_result.failed_resumes_given_up == run_result.resumes_gpu_taken  # none left waiting for ever
    # each one given up while the rest of the fleet could not carry the next hour was replaced in that same run
    assert run_result.failed_resumes_short >= 1
    assert run_result.failed_resumes_replaced_same_run == run_result.failed_resumes_short
    # fleet gives a resume up after its wait for the GPU (FLEETPILOT_FLEET_RESUME_WAIT_S), not hours later
    assert 0 < run_result.failed_resume_wait_max_s <= 3600
    assert run_result.tasks_completed == pytest.approx(run_result.tasks_submitted)

    # by default a resume vast still shows stopped after `resume_gpu_wait_s` is planned for as lost, so its
    # replacement is on the way before fleet gives the resume up: no give-up leaves the fleet short
    default = Engine(trace, POLICY_FACTORIES["predictive-park"](guardrails), scenario, 0, world, guardrails=guardrails)
    early = default.run()
    # a waiting resume the demand does not need is parked again rather than waited on until fleet gives it up
    # (scale-down's spare is the waiting resume itself), so some end parked, not given up
    assert early.resumes_gpu_taken >= 5 and 0 < early.failed_resumes_given_up <= early.resumes_gpu_taken
    assert early.failed_resumes_short < run_result.failed_resumes_short
    assert early.delay_cost_usd < run_result.delay_cost_usd


def test_a_waiting_resume_parked_again_is_not_counted_as_given_up() -> None:
    taken_for_good = quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 1, "price_usd_per_h": {"min": 0.5, "max": 0.5}}],
        stop_start={"gpu_taken_per_stopped_h": 1000.0, "gpu_free_after_s": None},
    )

    def script(view):
        actions = parking_script({})(view)
        if view.now_s == RESUME_AT + 600:
            actions = [Remove(1, "stop", "park")]  # called off while it waits: parked again
        if view.now_s == RESUME_AT + 3600:
            actions = [Remove(1, "destroy", "idle")]  # given back from parked, not from a failed start
        return actions

    result = run(script, taken_for_good)
    assert result.resumes_gpu_taken == 1 and result.parks == 2
    assert result.failed_resumes_given_up == 0 and result.failed_resume_wait_max_s == 0


def test_a_machine_stopped_after_it_ran_but_before_it_produced_is_parked_and_starts_again_in_minutes() -> None:
    """The decider parks a machine on the way the demand no longer needs once it has loaded: its image is on its
    disk, so a start brings it back after the restart and registration, not after another whole startup."""
    states: dict[float, MachineState] = {}
    stopped_at: list[float] = []

    def script(view):
        machine = next(iter(view.machines), None)
        if machine is None:
            return [] if states else [Launch(1)]
        states[view.now_s] = machine.state
        if not stopped_at and machine.running_s is not None:
            assert machine.state is MachineState.LOADING  # running, its worker not registered yet
            stopped_at.append(view.now_s)
            return [Remove(machine.instance_id, "stop", "park")]
        if view.now_s == 4 * 3600:
            return [Resume(machine.instance_id, "demand_back")]
        return []

    scenario = quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 1, "price_usd_per_h": {"min": 0.5, "max": 0.5}}]
    )
    result = Engine(QUIET_6H, Scripted(script), scenario, 0, WorldConfig(initial_machines=0)).run()
    assert stopped_at and stopped_at[0] < 4 * 3600 - 600
    assert result.parks == 1 and result.resumes == 1
    assert states[stopped_at[0] + 60] is MachineState.PARKED
    back_at = 4 * 3600 + RESTART_S + REGISTRATION_S
    assert states[back_at - 60] is MachineState.RESUMING
    assert states[back_at + 60] is MachineState.PRODUCING
