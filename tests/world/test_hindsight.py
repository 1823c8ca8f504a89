"""The hindsight reference: target tracking's best grid point on each trace, reported apart from the baselines."""

from __future__ import annotations

from sim.world.engine import Engine
from sim.world.evaluate import (
    BASELINES,
    POLICIES,
    REFERENCES,
    TARGET_TRACKING_HINDSIGHT,
    default_guardrails,
    evaluate,
)
from sim.world.model import WorldConfig
from sim.world.policies.target_tracking import TargetTrackingConfig, TargetTrackingPolicy
from sim.world.policies.target_tracking_hindsight import grid
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario

# a day: one machine's work, and from 10:00 to 14:00 eight machines'
DAY = Trace.of([16 if 10 * 60 <= m < 14 * 60 else 2 for m in range(24 * 60)], "step-day")


def test_the_grid_holds_target_trackings_defaults_and_every_combination_of_the_knobs() -> None:
    points = grid()
    assert points[0] == TargetTrackingConfig()
    assert len(points) == len(set(points)) == 1 + 2 * 2 * 2
    assert {p.target_utilisation for p in points} == {0.7, 0.8, 0.9}
    assert all(p.scale_down_cooldown_s == p.scale_down_stabilisation_s for p in points)


def test_the_reference_is_the_best_grid_point_and_never_worse_than_target_tracking() -> None:
    scenario = quiet_scenario()
    reference = evaluate(DAY, TARGET_TRACKING_HINDSIGHT, scenario, 0)
    tracking = evaluate(DAY, "target-tracking", scenario, 0)
    assert reference.kind == "hindsight_reference"
    assert reference.objective_usd <= tracking.objective_usd
    knobs = reference.extra["hindsight_knobs"]
    assert set(knobs) == {"target_utilisation", "backlog_drain_s", "scale_in_delay_s"}
    assert reference.extra["hindsight_grid_points"] == len(grid())
    guardrails = default_guardrails(WorldConfig(), scenario, DAY)
    runs = [
        Engine(DAY, TargetTrackingPolicy(config), scenario, 0, WorldConfig(), guardrails=guardrails).run()
        for config in grid()
    ]
    assert reference.objective_usd == min(run.objective_usd for run in runs)
    # on this day some knobs beat the defaults: the reference is the hindsight's, not target tracking's
    assert reference.objective_usd < tracking.objective_usd


def test_the_reference_is_no_baseline() -> None:
    assert TARGET_TRACKING_HINDSIGHT in REFERENCES
    assert TARGET_TRACKING_HINDSIGHT in POLICIES
    assert TARGET_TRACKING_HINDSIGHT not in BASELINES
