"""The baselines behave as documented; the reactive one reproduces the failure FleetPilot exists to fix."""

from __future__ import annotations

from collections.abc import Sequence

from sim.world.engine import Engine
from sim.world.model import Action, Launch, WorldConfig, WorldView
from sim.world.policies.reactive import ReactivePolicy
from sim.world.policies.target_tracking import TargetTrackingPolicy
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Hold

# 180 tasks/h on two RTX 4090s (240 tasks/h), and at 2 h a burst of 8 more tasks within one minute: 8 pending
# tasks are 4 minutes of one machine's work (DESIGN.md)
BURST_MINUTE = 120
BURST = Trace.of([11 if m == BURST_MINUTE else 3 for m in range(240)], "burst")


class Recording(ReactivePolicy):
    def __init__(self) -> None:
        super().__init__()
        self.launched_at: list[tuple[float, float]] = []  # (time, pending then)

    def decide(self, view: WorldView) -> Sequence[Action]:
        actions = super().decide(view)
        self.launched_at += [(view.now_s, view.pending_tasks) for a in actions if isinstance(a, Launch)]
        return actions


def test_reactive_launches_for_a_short_burst_the_running_fleet_clears() -> None:
    world = WorldConfig(initial_machines=2)
    scenario = quiet_scenario()
    held = Engine(BURST, Hold(), scenario, 0, world).run()
    # the two running machines clear the burst inside the grace period: no delay cost at all
    assert held.delay_cost_usd == 0
    assert held.wait_max_s < 15 * 60

    reactive = Recording()
    result = Engine(BURST, reactive, scenario, 0, world).run()
    assert [t for t, _ in reactive.launched_at] == [(BURST_MINUTE + 1) * 60], "one launch, on the burst"
    # the machine it bought arrives an hour after the queue emptied, gets no task, and was paid for
    assert result.launches == 1
    assert result.wasted_launches == 1
    assert result.delay_cost_usd == 0
    assert result.cost_usd > held.cost_usd + 0.5  # an hour and more of an RTX 4090 for nothing


def test_reactive_gives_back_idle_machines_when_nothing_is_pending() -> None:
    trace = Trace.of([1] * 60, "trickle")  # half of one machine's work
    result = Engine(trace, ReactivePolicy(), quiet_scenario(), 0, WorldConfig(initial_machines=4)).run()
    assert result.launches == 0
    assert result.cost_usd < 4 * 0.5 * 1.0  # three of the four went back within minutes


def test_target_tracking_sizes_the_fleet_to_load_over_target_utilisation() -> None:
    trace = Trace.of([8] * 600, "steady")  # 480 tasks/h: 4 machines' work, 5 at 80% utilisation
    policy = TargetTrackingPolicy()
    result = Engine(trace, policy, quiet_scenario(), 0, WorldConfig()).run()  # starts with 4, sized to the load
    assert result.peak_instances == 5
    assert result.launches == 1
    assert result.delay_cost_usd == 0
