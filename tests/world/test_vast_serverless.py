"""vast.ai Serverless's autoscaler as documented: hot = load ÷ target_util, cold capacity at cold_mult × that,
cold_workers kept before any destroy, cold workers started before new ones are recruited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sim.world.engine import Engine
from sim.world.model import Action, Launch, MachineState, Remove, Resume, WorldConfig, WorldView
from sim.world.policies.vast_serverless import VastServerlessConfig, VastServerlessPolicy, usd_per_task
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Hold

# 8 tasks a minute: 480 tasks/h, four RTX 4090s' work (120 tasks/h each); the hot target is 480 ÷ 0.9
STEADY_PER_MIN = 8
PRODUCING = MachineState.PRODUCING
HOT_TARGET_TASKS_PER_H = STEADY_PER_MIN * 60 / 0.9


class Recorder(VastServerlessPolicy):
    """The policy itself, keeping every decision's view (live machines) and actions."""

    def __init__(self, config: VastServerlessConfig = VastServerlessConfig()) -> None:
        super().__init__(config)
        self.decisions: list[tuple[WorldView, list[Action], dict[int, MachineState]]] = []
        self.usd_per_task: dict[int, float] = {}
        self.removed: list[tuple[Remove, MachineState, float]] = []  # with its state then and for how long

    def decide(self, view: WorldView) -> Sequence[Action]:
        actions = list(super().decide(view))
        states = {m.instance_id: m.state for m in view.machines}  # the views' machines change afterwards
        self.decisions.append((view, actions, states))
        self.usd_per_task |= {m.instance_id: usd_per_task(m) for m in view.machines}
        for removal in (a for a in actions if isinstance(a, Remove)):
            machine = view.machines_by_id[removal.instance_id]
            self.removed.append((removal, machine.state, view.now_s - machine.state_since_s))
        return actions


def _ready_quick(states: dict[int, MachineState]) -> int:
    return sum(1 for state in states.values() if state in (MachineState.PRODUCING, MachineState.PARKED))


def test_the_hot_target_is_the_measured_load_over_target_util() -> None:
    trace = Trace.of([STEADY_PER_MIN] * 10, "steady")
    view = Engine(trace, Hold(), quiet_scenario(), 0, WorldConfig()).view()
    view = replace(view, arrivals_by_minute=trace.arrivals_per_min, pending_tasks=0.0)
    assert VastServerlessPolicy().hot_target_tasks_per_h(view) == HOT_TARGET_TASKS_PER_H
    # a backlog adds its tasks spread over an hour
    backlog = replace(view, pending_tasks=90.0)
    assert VastServerlessPolicy().hot_target_tasks_per_h(backlog) == (STEADY_PER_MIN * 60 + 90) / 0.9


def test_it_keeps_cold_mult_times_the_hot_target_cold_workers_included() -> None:
    # steady load for 4 h: five hot workers (5 x 120 >= 533), and 2.5 x 533 = 1333 tasks/h planned: 12 workers,
    # the seven beyond the hot ones recruited, loaded and stopped
    trace = Trace.of([STEADY_PER_MIN] * 240, "steady")
    policy = Recorder()
    result = Engine(trace, policy, quiet_scenario(), 0, WorldConfig()).run()
    assert result.peak_instances == 12
    assert result.parks >= 7
    _, _, states = policy.decisions[-1]
    assert sum(1 for s in states.values() if s is MachineState.PARKED) == 7
    assert sum(1 for s in states.values() if s is MachineState.PRODUCING) == 5
    assert result.delay_cost_usd == 0


def test_cold_workers_are_started_before_new_ones_are_recruited() -> None:
    # busy, quiet for 40 minutes, busy again a little below the first level: within the planning hour the cold
    # workers are kept, and the return is served by starting them, nothing new launched
    busy, quiet, back = [STEADY_PER_MIN] * 180, [1] * 40, [STEADY_PER_MIN - 2] * 120
    trace = Trace.of(busy + quiet + back, "busy-quiet-busy")
    policy = Recorder()
    result = Engine(trace, policy, quiet_scenario(), 0, WorldConfig()).run()
    return_s = (180 + 40) * 60.0
    later = [(view.now_s, actions) for view, actions, _ in policy.decisions if view.now_s > return_s]
    assert any(isinstance(a, Resume) for _, actions in later for a in actions)
    assert not [a for _, actions in later for a in actions if isinstance(a, Launch)]
    assert result.resumes > 0


def test_no_worker_is_destroyed_while_cold_workers_or_fewer_are_ready() -> None:
    # an hour of load, then a trickle for five hours: the planned capacity falls below one worker, and the
    # autoscaler destroys down to cold_workers (5) ready-quick workers, never below
    trace = Trace.of([STEADY_PER_MIN] * 60 + [1] * 300, "fall")
    policy = Recorder()
    Engine(trace, policy, quiet_scenario(), 0, WorldConfig()).run()
    destroyed = 0
    for _, actions, states in policy.decisions:
        destroys = [a for a in actions if isinstance(a, Remove) and not a.parks]
        if destroys:
            assert _ready_quick(states) - len(destroys) >= VastServerlessConfig().cold_workers
            destroyed += len(destroys)
    assert destroyed > 0
    _, _, states = policy.decisions[-1]
    assert _ready_quick(states) == VastServerlessConfig().cold_workers


def test_it_releases_the_worst_price_performance_first() -> None:
    # cheap and dear RTX 4090s: the fleet ends up with both, and every release takes the dearest producers
    market = [
        {"gpu_model": "RTX 4090", "count": 6, "price_usd_per_h": {"min": 0.4, "max": 0.4}},
        {"gpu_model": "RTX 4090", "count": 20, "price_usd_per_h": {"min": 0.7, "max": 0.7}},
    ]
    trace = Trace.of([STEADY_PER_MIN] * 120 + [2] * 120, "fall")
    policy = Recorder()
    Engine(trace, policy, quiet_scenario(market=market), 0, WorldConfig()).run()
    releases = 0
    prices = policy.usd_per_task
    for _, actions, states in policy.decisions:
        released = {a.instance_id for a in actions if isinstance(a, Remove) and states[a.instance_id] is PRODUCING}
        kept = [i for i, state in states.items() if state is PRODUCING and i not in released]
        for instance_id in released:
            releases += 1
            assert all(prices[instance_id] >= prices[i] for i in kept)
    assert releases > 0


def test_max_workers_caps_hot_and_cold_workers_together() -> None:
    trace = Trace.of([STEADY_PER_MIN] * 180, "steady")
    result = Engine(trace, VastServerlessPolicy(VastServerlessConfig(max_workers=8)), quiet_scenario(), 0).run()
    assert result.peak_instances == 8


def test_a_start_waiting_for_a_gpu_rented_meanwhile_is_destroyed_after_the_resume_wait() -> None:
    # every stopped GPU is rented by someone else within minutes and never comes back: each start waits for good
    scenario = quiet_scenario(stop_start={"gpu_taken_per_stopped_h": 1000.0, "gpu_free_after_s": None})
    busy, quiet, back = [STEADY_PER_MIN] * 180, [1] * 40, [STEADY_PER_MIN - 2] * 120
    policy = Recorder()
    result = Engine(Trace.of(busy + quiet + back, "busy-quiet-busy"), policy, scenario, 0, WorldConfig()).run()
    assert result.resumes_gpu_taken > 0
    assert result.failed_resumes_given_up == result.resumes_gpu_taken
    given_up = [(removal, waited_s) for removal, state, waited_s in policy.removed if state is MachineState.RESUMING]
    assert len(given_up) == result.failed_resumes_given_up
    for removal, waited_s in given_up:
        assert removal.reason == "failed" and not removal.parks
        assert waited_s >= VastServerlessConfig().resume_wait_s
    assert result.tasks_unserved == 0
