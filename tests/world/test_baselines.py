"""The baselines behave as documented; the reactive one reproduces the failure FleetPilot exists to fix."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pytest

from sim.world.engine import Engine, WorldPolicy
from sim.world.evaluate import BASELINES, POLICIES, evaluate
from sim.world.model import Action, Launch, Remove, WorldConfig, WorldView
from sim.world.policies.aws_predictive import AwsPredictiveConfig, AwsPredictivePolicy
from sim.world.policies.demand_based import DemandBasedConfig, DemandBasedPolicy
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


class Recorder:
    """Wraps a policy and keeps, for every decision, the time, the queue and the actions it returned."""

    def __init__(self, policy: WorldPolicy) -> None:
        self.policy = policy
        self.name = policy.name
        self.decision_interval_s = policy.decision_interval_s
        self.decisions: list[tuple[float, float, list[Action]]] = []

    def decide(self, view: WorldView) -> Sequence[Action]:
        actions = list(self.policy.decide(view))
        self.decisions.append((view.now_s, view.pending_tasks, actions))
        return actions

    def launches(self) -> list[tuple[float, int]]:
        return [(t, a.count) for t, _, actions in self.decisions for a in actions if isinstance(a, Launch)]

    def removals(self) -> list[tuple[float, float, Remove]]:
        return [(t, q, a) for t, q, actions in self.decisions for a in actions if isinstance(a, Remove)]


# two identical days: one machine's work, and from 10:00 to 14:00 eight machines' (ten at 80% utilisation)
STEP_START_H, STEP_END_H = 10, 14
TWO_DAYS = Trace.of(
    [16 if STEP_START_H * 60 <= m % (24 * 60) < STEP_END_H * 60 else 2 for m in range(2 * 24 * 60)], "two-days"
)


def test_aws_predictive_is_target_tracking_until_it_has_a_day_of_history() -> None:
    day_one = Trace.of(TWO_DAYS.arrivals_per_min[: 24 * 60], "day-one")
    aws = Engine(day_one, AwsPredictivePolicy(), quiet_scenario(), 0, WorldConfig()).run()
    tracking = Engine(day_one, TargetTrackingPolicy(), quiet_scenario(), 0, WorldConfig()).run()
    assert aws.objective_usd == tracking.objective_usd
    assert aws.launches == tracking.launches > 0


def test_aws_predictive_launches_a_startup_ahead_of_yesterdays_busy_hours() -> None:
    scenario = quiet_scenario()
    aws = Recorder(AwsPredictivePolicy())
    with_forecast = Engine(TWO_DAYS, aws, scenario, 0, WorldConfig()).run()
    tracking = Recorder(TargetTrackingPolicy())
    without = Engine(TWO_DAYS, tracking, scenario, 0, WorldConfig()).run()

    day_two_step_s = (24 + STEP_START_H) * 3600.0
    buffer_s = AwsPredictiveConfig().scheduling_buffer_s
    early = [(t, n) for t, n in aws.launches() if day_two_step_s - buffer_s <= t < day_two_step_s]
    # the step is launched as soon as the hour's forecast takes effect, a buffer before it starts: it needs
    # 960 tasks/h x 1.1 / (120 x 0.8) = 11 machines, of which the night's load keeps one or two
    assert early and early[0][0] == day_two_step_s - buffer_s
    assert sum(n for _, n in early) >= 9
    assert not [t for t, _ in tracking.launches() if day_two_step_s - buffer_s <= t < day_two_step_s]
    assert with_forecast.delay_cost_usd < without.delay_cost_usd


def test_aws_predictive_forecasts_from_the_same_hour_of_past_days_only() -> None:
    policy = AwsPredictivePolicy()
    seen = list(TWO_DAYS.arrivals_per_min[: 24 * 60 + 60])  # day one and the first hour of day two
    view = Engine(Trace.of(seen, "seen"), Hold(), quiet_scenario(), 0, WorldConfig()).view()
    view = replace(view, arrivals_by_minute=seen, now_s=(24 * 60 + 59) * 60.0)
    assert policy.forecast_tasks_per_h(view, 24 + STEP_START_H) == 16 * 60
    assert policy.forecast_tasks_per_h(view, 24 + 3) == 2 * 60
    assert policy.forecast_tasks_per_h(view, 20) is None  # no day before the first


def test_aws_predictive_launches_at_most_an_hour_ahead_as_aws_allows() -> None:
    assert AwsPredictiveConfig().scheduling_buffer_s == 3600.0
    with pytest.raises(ValueError, match="scheduling_buffer_s=7200"):
        AwsPredictiveConfig(scheduling_buffer_s=7200.0)


def test_aws_predictive_sees_a_weekend_coming_from_the_same_weekday_a_week_before() -> None:
    # twelve days: weekdays at 16 tasks a minute, days 5 and 6 (the weekend) at 2; hour 10 of day 12 is a Saturday
    days = 12
    seen = [2 if (m // (24 * 60)) % 7 in (5, 6) else 16 for m in range(days * 24 * 60 + 1)]
    view = Engine(Trace.of(seen[:60], "seen"), Hold(), quiet_scenario(), 0, WorldConfig()).view()
    view = replace(view, arrivals_by_minute=seen, now_s=days * 24 * 3600.0)
    policy = AwsPredictivePolicy()
    assert policy.forecast_tasks_per_h(view, days * 24 + 10) == 2 * 60  # last Saturday's, not the days' mean
    assert policy.forecast_tasks_per_h(view, 11 * 24 + 10) == 16 * 60  # Friday: the Friday before
    # before a week is behind the hour, the same hour of every previous day: day 6 (Sunday) from days 0-5
    assert policy.forecast_tasks_per_h(view, 6 * 24 + 10) == (5 * 16 + 2) * 60 / 6


QUEUED = Trace.of([80 if m == 60 else 2 for m in range(180)], "queued")  # 80 tasks queued at once


def test_demand_based_packs_queued_tasks_onto_new_machines() -> None:
    # one machine (8 slots: 120 tasks/h x 4 min) takes 8 of them; the rest need a machine per 8
    policy = Recorder(DemandBasedPolicy())
    Engine(QUEUED, policy, quiet_scenario(), 0, WorldConfig(initial_machines=1)).run()
    first_time, first_count = policy.launches()[0]
    assert first_time == 61 * 60
    assert first_count in (9, 10)
    # the machines on the way take the rest of the queue in its bookkeeping: nothing more while they start
    assert all(t >= first_time + 3600 for t, _ in policy.launches()[1:])


def test_demand_based_with_rays_upscaling_speed_starts_no_more_than_it_allows() -> None:
    config = DemandBasedConfig(upscaling_speed=1.0)
    policy = Recorder(DemandBasedPolicy(config))
    result = Engine(QUEUED, policy, quiet_scenario(), 0, WorldConfig(initial_machines=1)).run()
    first_time, first_count = policy.launches()[0]
    # ten machines wanted; with one producing, five may be starting at a time, and no more while they start
    assert first_count == config.min_pending_launches
    assert all(t >= first_time + 3600 for t, _ in policy.launches()[1:])
    assert result.peak_instances <= 1 + 2 * first_count
    # no more while those five are all starting (a startup takes at least an hour here)
    assert all(t >= first_time + 3600 for t, _ in policy.launches()[1:])
    assert result.peak_instances <= 1 + 2 * first_count


def test_demand_based_gives_back_empty_machines_after_the_idle_timeout_and_never_with_work_queued() -> None:
    trace = Trace.of([1] * 120, "trickle")  # half of one machine's work; the job system fills the oldest first
    policy = Recorder(DemandBasedPolicy())
    result = Engine(trace, policy, quiet_scenario(), 0, WorldConfig(initial_machines=4)).run()
    removals = policy.removals()
    assert len(removals) == 3 and result.launches == 0
    config = DemandBasedConfig()
    for at_s, pending, removal in removals:
        assert removal.reason == "idle"
        assert pending < 0.5
        assert at_s >= 240.0 + config.idle_timeout_s  # a task's length after producing, then the timeout


def test_the_evaluator_lists_every_baseline() -> None:
    assert set(BASELINES) == {"reactive", "target-tracking", "aws-predictive", "demand-based", "vast-serverless"}
    assert set(BASELINES) <= set(POLICIES)


def _plain_diurnal(days: int, night_per_min: float, peak_per_min: float) -> Trace:
    """A smooth working day, repeated: night level to the peak at 14:00 and back, a raised cosine 16 h wide."""
    rates = []
    for minute in range(days * 24 * 60):
        distance_h = abs((minute / 60.0) % 24.0 - 14.0)
        shape = math.cos(math.pi / 2 * distance_h / 8.0) ** 2 if distance_h < 8.0 else 0.0
        rates.append(round(night_per_min + (peak_per_min - night_per_min) * shape))
    return Trace.of(rates, "plain-diurnal")


def test_reactive_serves_a_plain_diurnal_trace_and_gives_machines_back_for_good() -> None:
    # two days from 2 to 12 machines' work: the instance cap (the guardrails', 30 in this market) is far above it
    trace = _plain_diurnal(2, night_per_min=4, peak_per_min=24)
    evaluation = evaluate(trace, "reactive", quiet_scenario(), 0)
    run = evaluation.run
    assert run is not None
    refused_by_cap = [e for e in evaluation.extra["limits"] if e["limit"] in ("max_instances", "world_max_instances")]
    assert refused_by_cap == []
    assert run.parks == 0  # nothing was stopped and left to hold a place under the cap
    assert run.tasks_unserved == 0
    # a morning's ramp waits for machines 1-2 h away, no more
    assert run.wait_max_s < 4 * 3600
