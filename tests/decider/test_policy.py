"""The predictive policy on plain contract messages: hold, forecast-sized launches, no shedding in short troughs."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from services.decider.config import DeciderSettings
from services.decider.policy import PolicyConfig, PredictivePolicy, recommend
from services.decider.policy.forecast import backlog_after, damped_ahead_s, learned_startup_s
from services.demand.core import DemandCore
from services.demand.saved import restored, saved_of
from shared.contract import (
    DemandState,
    FailureReason,
    InstanceState,
    LaunchReason,
    QueueDepth,
    QueueSnapshot,
    RemovalReason,
    SeasonEcho,
    TaskEvent,
)
from shared.settings import Settings
from tests.decider.factories import HOUR_S, line, loading, producing, signal, snapshot, window

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
# scale-down as it is without parking (the default parks: tests/decider/test_policy_parking.py)
ON_DEMAND = PolicyConfig(park=False, mpc=False)
# the sizing rules' own arithmetic (the expected-cost choice, on by default, is tests/decider/test_policy_mpc.py)
RULES = PolicyConfig(mpc=False)


def test_eight_pending_tasks_on_a_served_fleet_hold() -> None:
    fleet = snapshot(NOW, producing(4, NOW))
    demand = signal(NOW, pending=8, rate_per_h=300, producing_workers=4)
    rec = recommend(demand, fleet, NOW)
    assert rec.is_hold
    assert rec.explanation.startswith("hold:")
    assert "8 pending" in rec.explanation and "4 producing" in rec.explanation
    assert rec.figures.target_machines == 3  # 300/h at 120/h each


def test_a_queue_alone_that_the_fleet_drains_in_time_does_not_launch() -> None:
    fleet = snapshot(NOW, producing(2, NOW))
    demand = signal(NOW, pending=200, rate_per_h=0, producing_workers=2, state=DemandState.UNDER_PROVISIONED)
    assert recommend(demand, fleet, NOW).is_hold  # 200 tasks drain in 50 min at 240/h: a machine lands in 1.5 h


def expected_launches(rate_per_h: float, pending: int, producing_now: int, thr: float = 120) -> int:
    backlog_at_horizon = pending + (rate_per_h - producing_now * thr) * 1.5  # default startup: 1.5 h
    need = rate_per_h / thr + backlog_at_horizon / thr  # drained within one hour
    return math.ceil(need - 0.1) - producing_now


def test_sustained_arrivals_above_capacity_launch_for_the_forecast_not_the_queue() -> None:
    fleet = snapshot(NOW, producing(2, NOW))
    launches = {}
    for pending in (8, 40):
        demand = signal(NOW, pending=pending, rate_per_h=600, producing_workers=2, above_capacity_for_s=1800,
                        state=DemandState.UNDER_PROVISIONED)  # fmt: skip
        rec = recommend(demand, fleet, NOW, RULES)
        assert [plan.reason for plan in rec.launches] == [LaunchReason.SUSTAINED_DEMAND]
        assert rec.launches[0].launch_priority == "normal"
        launches[pending] = rec.launch_count
        assert rec.launch_count == expected_launches(600, pending, 2)
    # 5 machines for 600/h plus the 540 tasks that pile up before a new machine lands: 8, whatever the queue
    assert launches == {8: 8, 40: 8}
    twice = signal(NOW, pending=8, rate_per_h=1200, producing_workers=2, above_capacity_for_s=1800)
    assert recommend(twice, fleet, NOW, RULES).launch_count == expected_launches(1200, 8, 2)


def test_arrivals_just_above_capacity_launch_only_for_the_backlog_that_cannot_drain() -> None:
    fleet = snapshot(NOW, producing(4, NOW))
    demand = signal(NOW, pending=30, rate_per_h=540, producing_workers=4, above_capacity_for_s=120)
    rec = recommend(demand, fleet, NOW, RULES)
    # not sustained yet: two minutes over capacity are expected to last two more, and the 32 tasks they leave
    # are more than the producers can take on while serving 480/h: one machine clears them
    assert rec.figures.sustained is False and rec.figures.undrainable_backlog is True
    assert [(plan.reason, plan.count) for plan in rec.launches] == [(LaunchReason.BACKLOG, 1)]
    # ten minutes over capacity leave 30 + 60/h × 10 min = 40 tasks: still one machine, not the rate's deficit
    longer = signal(NOW, pending=30, rate_per_h=540, producing_workers=4, above_capacity_for_s=600)
    assert recommend(longer, fleet, NOW, RULES).launch_count == 1
    # at capacity, the same queue drains: hold
    at_capacity = signal(NOW, pending=30, rate_per_h=480, producing_workers=4, above_capacity_for_s=120)
    assert recommend(at_capacity, fleet, NOW, RULES).is_hold


def test_machines_already_loading_are_counted() -> None:
    demand = signal(NOW, pending=8, rate_per_h=600, producing_workers=2, above_capacity_for_s=1800)
    without = recommend(demand, snapshot(NOW, producing(2, NOW)), NOW)
    assert without.launch_count == 8
    with_loading = recommend(demand, snapshot(NOW, producing(2, NOW) + loading(8, NOW)), NOW)
    assert with_loading.is_hold, with_loading.explanation
    assert with_loading.figures.arriving == 8
    assert "8 arriving" in with_loading.explanation
    partly = recommend(demand, snapshot(NOW, producing(2, NOW) + loading(3, NOW)), NOW)
    assert 0 < partly.launch_count < 8
    # launches sent but not yet in the snapshot count the same way
    unseen = recommend(demand, snapshot(NOW, producing(2, NOW)), NOW, unobserved_launches=8)
    assert unseen.is_hold


def test_a_cold_start_plans_machines_of_the_configured_gpu_count() -> None:
    """Nothing has produced, so nothing measures a machine: the prior is one GPU's pace times the GPUs of the
    machines the provisioner rents. Planned at one GPU's pace, a fleet of 8-GPU machines got eight times the
    machines its demand needed; and an 8-GPU machine on the way counts for one machine of that pace, not eight."""
    cold = signal(NOW, pending=40, rate_per_h=1920, throughput_per_h=None, above_capacity_for_s=1800,
                  state=DemandState.UNDER_PROVISIONED)  # fmt: skip
    for config in (PolicyConfig(), RULES):
        one_gpu = recommend(cold, snapshot(NOW, []), NOW, config).launch_count
        eight = PolicyConfig(gpus_per_machine=8, mpc=config.mpc)
        eight_gpus = recommend(cold, snapshot(NOW, []), NOW, eight).launch_count
        assert one_gpu >= 16, one_gpu  # 1,920 tasks/h at 120 a machine
        assert 2 <= eight_gpus <= math.ceil(one_gpu / 8), (one_gpu, eight_gpus)
        # those launched, now on the way, are what the demand needs: the next run holds
        coming = [
            machine.model_copy(update={"num_gpus": 8, "price_usd_per_h": 4.0})
            for machine in loading(eight_gpus, NOW, created_ago_s=300)
        ]
        assert recommend(cold, snapshot(NOW, coming), NOW, eight).launch_count == 0


def test_the_gpus_per_machine_setting_every_service_reads_reaches_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DeciderSettings().policy_config(Settings()).machine_prior_tasks_per_h == 120.0
    monkeypatch.setenv("FLEETPILOT_GPUS_PER_MACHINE", "8")
    config = DeciderSettings().policy_config(Settings())
    assert (config.machine_prior_tasks_per_h, config.machine_prior_price_usd_per_h) == (960.0, 4.0)


def test_a_trough_shorter_than_the_startup_time_does_not_shed_machines() -> None:
    idle_fleet = snapshot(NOW, producing(4, NOW, last_task_ago_s=2400))  # idle 40 min
    trough = signal(NOW, rate_per_h=0, windows=[window(300, 0), window(1800, 0), window(7200, 480)])
    rec = recommend(trough, idle_fleet, NOW, ON_DEMAND)
    assert rec.removals == ()
    assert rec.figures.keep_machines == 4  # the 2 h window still shows 480 tasks/h
    # a lull longer than the startup horizon (every window quiet) does give them back
    lull = signal(NOW, rate_per_h=0, windows=[window(300, 0), window(1800, 0), window(7200, 0)])
    rec = recommend(lull, idle_fleet, NOW, ON_DEMAND)
    assert [(plan.verb, plan.reason) for plan in rec.removals] == [("drain", RemovalReason.IDLE)] * 4


def test_scale_down_only_removes_machines_idle_long_enough_and_keeps_hysteresis() -> None:
    busy = producing(3, NOW, last_task_ago_s=30)
    idle = producing(3, NOW, first_id=200, last_task_ago_s=2400)
    demand = signal(NOW, rate_per_h=240, pending=0, windows=[window(300, 240), window(7200, 240)])
    rec = recommend(demand, snapshot(NOW, busy + idle), NOW, ON_DEMAND)
    # keep 2 for 240/h; 6 machines, margin 1: remove the idle ones only
    assert sorted(plan.instance_id for plan in rec.removals) == [200, 201, 202]
    assert all(plan.reason is RemovalReason.OVER_PROVISIONED for plan in rec.removals)
    # within the margin: 3 machines for keep 2... margin is max(1, 20% of 2) = 1, so 3 machines shed one; with
    # keep 10 and 11 machines (margin 2) nothing goes
    eleven = producing(11, NOW, last_task_ago_s=2400)
    demand = signal(NOW, rate_per_h=1200, windows=[window(300, 1200), window(7200, 1200)])
    assert recommend(demand, snapshot(NOW, eleven), NOW, ON_DEMAND).removals == ()


def test_busy_producers_are_drained_when_the_queue_is_empty_and_those_left_keep_headroom() -> None:
    """A job system that spreads tasks over every worker leaves none idle: the surplus must still go."""
    busy = [line(100 + i, InstanceState.PRODUCING, NOW, last_task_ago_s=10 + 10 * i) for i in range(10)]
    demand = signal(NOW, rate_per_h=240, pending=0, windows=[window(300, 240), window(7200, 240)])
    rec = recommend(demand, snapshot(NOW, busy), NOW, ON_DEMAND)
    # keep 2 for 240/h; the 3 left serve it with 50% headroom (360/h); the least recently busy go first
    assert [(plan.verb, plan.instance_id) for plan in rec.removals] == [("drain", 100 + i) for i in range(9, 2, -1)]
    assert all(plan.reason is RemovalReason.OVER_PROVISIONED for plan in rec.removals)
    # more than five minutes of the producers' work queued (10 × 120/h: 100 tasks): only idle machines go
    queued = signal(NOW, rate_per_h=240, pending=150, windows=[window(300, 240), window(7200, 240)])
    assert recommend(queued, snapshot(NOW, busy), NOW, ON_DEMAND).removals == ()


def test_machines_still_loading_never_make_busy_producers_look_surplus() -> None:
    busy = producing(4, NOW, last_task_ago_s=30)
    demand = signal(NOW, rate_per_h=480, pending=0, windows=[window(300, 480), window(7200, 480)])
    rec = recommend(demand, snapshot(NOW, busy + loading(8, NOW)), NOW)
    # 12 machines for a keep of 4 is a surplus, but the 4 producers are all that serve 480/h until the rest land:
    # the machines still loading are given back instead (billed while loading, needed by nobody)
    assert rec.figures.keep_machines == 4
    # (beyond twice the kept fleet: recurring bursts come back before a machine could be launched again)
    assert [(plan.verb, plan.reason) for plan in rec.removals] == [("destroy", RemovalReason.OVER_PROVISIONED)] * 4
    assert all(500 <= plan.instance_id < 508 for plan in rec.removals)
    # where loading is not billed (vast's own rule) they cost nothing yet, and stay
    unbilled = PredictivePolicy(PolicyConfig(loading_billed=False))
    assert unbilled.recommend(demand, snapshot(NOW, busy + loading(8, NOW)), NOW).removals == ()


def test_the_last_producer_is_never_shed_while_tasks_are_queued() -> None:
    idle = producing(3, NOW, last_task_ago_s=2400)
    demand = signal(NOW, pending=2, rate_per_h=0, windows=[window(300, 0), window(7200, 0)], throughput_per_h=1000)
    rec = recommend(demand, snapshot(NOW, idle), NOW)
    assert len(rec.removals) == 2  # keeps one for the two queued tasks


def test_workers_stalled_with_59_tasks_queued_replaces_and_never_scales_down() -> None:
    silent = producing(3, NOW, last_task_ago_s=2400)
    demand = signal(NOW, state=DemandState.WORKERS_STALLED, pending=59, rate_per_h=100, producing_workers=0)
    rec = recommend(demand, snapshot(NOW, silent), NOW)
    assert rec.removals == ()
    assert rec.launch_count == 3  # 100/h plus the 209 tasks queued when they land, drained within an hour
    assert all(plan.reason is LaunchReason.REPLACEMENT for plan in rec.launches)
    assert rec.launches[0].launch_priority == "emergency"  # nobody is serving the queue
    assert rec.figures.stalled_producers == 3
    assert "workers stalled" in rec.explanation
    # replacements already on their way are counted
    arriving = recommend(demand, snapshot(NOW, silent + loading(5, NOW)), NOW)
    assert arriving.removals == () and arriving.is_hold


def test_failed_machines_are_destroyed_with_their_reason_and_replaced_when_needed() -> None:
    fleet = [
        *producing(2, NOW),
        line(900, InstanceState.FAILED, NOW, failure_reason=FailureReason.STUCK_LOADING, last_task_ago_s=None),
        line(901, InstanceState.FAILED, NOW, failure_reason=FailureReason.DEAD),
    ]
    demand = signal(NOW, pending=10, rate_per_h=480, producing_workers=2)
    rec = recommend(demand, snapshot(NOW, fleet), NOW)
    destroys = {(plan.instance_id, plan.reason) for plan in rec.removals_of("destroy")}
    assert destroys == {(900, RemovalReason.STUCK_LOADING), (901, RemovalReason.DEAD)}
    assert rec.replacements and rec.replacements[0].count == 2  # 4 machines needed for 480/h, 2 left


def test_drained_machines_are_destroyed_once_their_last_task_is_done() -> None:
    done = line(300, InstanceState.DRAINING, NOW, state_for_s=900, last_task_ago_s=800)
    busy = line(301, InstanceState.DRAINING, NOW, state_for_s=900, last_task_ago_s=60)
    rec = recommend(signal(NOW, rate_per_h=120), snapshot(NOW, [*producing(1, NOW), done, busy]), NOW, ON_DEMAND)
    assert [(plan.verb, plan.instance_id) for plan in rec.removals] == [("destroy", 300)]


def test_no_machine_at_all_with_tasks_queued_launches_an_emergency_machine() -> None:
    rec = recommend(signal(NOW, pending=8, rate_per_h=0), snapshot(NOW, []), NOW)
    assert rec.launch_count == 1
    assert rec.launches[0].launch_priority == "emergency"
    assert rec.launches[0].reason is LaunchReason.BACKLOG


def test_gpu_preferences_rank_by_measured_dollars_per_task() -> None:
    fleet = producing(2, NOW, gpu_model="RTX 4090", price_usd_per_h=0.50) + producing(
        2, NOW, first_id=300, gpu_model="RTX 5090", price_usd_per_h=0.43
    )
    demand = signal(NOW, pending=10, rate_per_h=1200, above_capacity_for_s=3600)
    # by default any allowed model: the provisioner filters on the list, and the fleet's models run out
    assert recommend(demand, snapshot(NOW, fleet), NOW).launches[0].gpu_models == ()
    ranked = PredictivePolicy(PolicyConfig(rank_fleet_gpu_models=True))
    assert ranked.recommend(demand, snapshot(NOW, fleet), NOW).launches[0].gpu_models == ("RTX 5090", "RTX 4090")
    preferred = PredictivePolicy(PolicyConfig(preferred_gpu_models=("H100",)))
    assert preferred.recommend(demand, snapshot(NOW, fleet), NOW).launches[0].gpu_models == ("H100",)


def test_startup_time_is_learned_from_the_fleet() -> None:
    quick = producing(3, NOW, created_ago_s=3 * HOUR_S, state_for_s=2.5 * HOUR_S)  # 30 min from launch
    assert learned_startup_s(quick, default_s=5400, min_samples=3, min_s=600, max_s=21600) == 1800
    assert learned_startup_s(quick[:2], default_s=5400, min_samples=3, min_s=600, max_s=21600) == 5400
    demand = signal(NOW, pending=8, rate_per_h=600, producing_workers=3, above_capacity_for_s=1800)
    rec = recommend(demand, snapshot(NOW, quick), NOW)
    assert rec.figures.startup_s == 1800


def test_a_resumed_machine_counts_its_first_startup_not_its_return_from_parking() -> None:
    # created a day ago, produced 30 min later, parked overnight, producing again for the last 10 minutes
    resumed = [
        line.model_copy(update={"first_producing_at": NOW - timedelta(hours=23.5)})
        for line in producing(3, NOW, created_ago_s=24 * HOUR_S, state_for_s=600)
    ]
    assert learned_startup_s(resumed, default_s=5400, min_samples=3, min_s=600, max_s=21600) == 1800


def test_a_machine_parked_before_it_ever_produced_counts_its_startup_without_the_wait() -> None:
    # created 7 h ago, loaded, parked 5 h, producing for the last 10 minutes: its startup is 2 h less the
    # 10 minutes it has produced, not the 7 h since its creation
    waited = [
        line.model_copy(
            update={"first_producing_at": NOW - timedelta(minutes=10), "parked_before_producing_s": 5 * HOUR_S}
        )
        for line in producing(3, NOW, created_ago_s=7 * HOUR_S, state_for_s=600)
    ]
    assert learned_startup_s(waited, default_s=5400, min_samples=3, min_s=600, max_s=21600) == 2 * HOUR_S - 600


def test_fluid_backlog_counts_machines_as_they_arrive() -> None:
    # 100 tasks, 120/h arriving, one machine now and one in 30 min, each 120/h
    left = backlog_after(3600, backlog_tasks=100, arrival_per_h=120, machines_now=1, ready_offsets=[1800],
                         throughput_per_h=120)  # fmt: skip
    assert left == 40  # flat for 30 min, then draining at 120/h for 30 min
    assert backlog_after(3600, backlog_tasks=0, arrival_per_h=0, machines_now=0, ready_offsets=[],
                         throughput_per_h=120) == 0  # fmt: skip


def test_a_significant_one_hour_ramp_launches_before_arrivals_exceed_capacity() -> None:
    fleet = snapshot(NOW, producing(8, NOW))  # 960 tasks/h of capacity
    # demand still says steady and arrivals are under capacity, but they rise by 400/h every hour
    ramp = [window(900, 900), window(3600, 800, trend_per_h2=400), window(21600, 700)]
    rec = recommend(signal(NOW, rate_per_h=800, windows=ramp, producing_workers=8), fleet, NOW)
    # from the 15 min rate, 400/h² over startup (1.5 h) + half the window (1 h) + half the 15 min window: 2.625 h
    # ahead, carried 3 h × (1 − e^(−2.625/3)) = 1.75 h by the damped trend, 900 + 400 × 1.75 ≈ 1600/h
    assert rec.figures.arrival_forecast_per_h == pytest.approx(900 + 400 * 3 * (1 - math.exp(-2.625 / 3)), abs=0.01)
    assert [plan.reason for plan in rec.launches] == [LaunchReason.SUSTAINED_DEMAND]
    assert rec.launch_count >= 7
    assert "arrivals rising 400/h per hour, damped over 3h)" in rec.explanation
    # in a straight line it would be 900 + 400 × 2.625 = 1950/h: capped at twice the rate, and the reader told so
    straight = PolicyConfig(trend_damping_s=0.0)
    rec = recommend(signal(NOW, rate_per_h=800, windows=ramp, producing_workers=8), fleet, NOW, straight)
    assert rec.figures.arrival_forecast_per_h == 1800
    assert "arrivals rising 400/h per hour, held at ×2 the current rate)" in rec.explanation
    # a damped slope steep enough to pass the cap says both
    steep = [window(900, 900), window(3600, 800, trend_per_h2=1600), window(21600, 700)]
    rec = recommend(signal(NOW, rate_per_h=800, windows=steep, producing_workers=8), fleet, NOW)
    assert rec.figures.arrival_forecast_per_h == 1800
    assert "arrivals rising 1600/h per hour, damped over 3h, held at ×2 the current rate)" in rec.explanation
    flat = [window(900, 800), window(3600, 800), window(21600, 700)]
    assert recommend(signal(NOW, rate_per_h=800, windows=flat, producing_workers=8), fleet, NOW).is_hold
    # a slope inside the minute noise (≈ 98/h² at 800/h) is not extrapolated
    noise = [window(900, 820), window(3600, 800, trend_per_h2=150), window(21600, 700)]
    assert recommend(signal(NOW, rate_per_h=800, windows=noise, producing_workers=8), fleet, NOW).is_hold


def test_a_damped_trend_follows_the_slope_for_the_next_hour_and_never_carries_it_past_its_damping_time() -> None:
    """τ(1 − e^(−h/τ)) at τ = 3 h: within a quarter hour of the straight line for the next hour, 1.75 h for the 2.6 h
    a first morning's slope was carried to the horizon's middle, and never more than 3 h however far ahead."""
    three_h = 3 * HOUR_S
    assert damped_ahead_s(HOUR_S, three_h) == pytest.approx(0.85 * HOUR_S, abs=0.01 * HOUR_S)
    assert damped_ahead_s(2.625 * HOUR_S, three_h) == pytest.approx(1.75 * HOUR_S, abs=0.01 * HOUR_S)
    assert damped_ahead_s(100 * HOUR_S, three_h) < three_h
    assert damped_ahead_s(0.0, three_h) == 0.0
    assert damped_ahead_s(2.625 * HOUR_S, 0.0) == 2.625 * HOUR_S  # no damping: a straight line


def test_a_step_is_not_extrapolated_as_a_ramp() -> None:
    fleet = snapshot(NOW, producing(8, NOW))
    spike = [window(900, 3000), window(3600, 1400, trend_per_h2=2000), window(21600, 1000)]
    rec = recommend(signal(NOW, rate_per_h=1400, windows=spike, producing_workers=8), fleet, NOW)
    assert rec.figures.arrival_forecast_per_h == 1400  # the sustained rate, no slope


def test_a_significant_decline_sheds_to_the_last_hour_with_a_small_margin() -> None:
    idle = snapshot(NOW, producing(12, NOW, last_task_ago_s=2400))
    falling = [window(900, 400), window(3600, 600, trend_per_h2=-400), window(21600, 1200)]
    rec = recommend(signal(NOW, rate_per_h=400, windows=falling), idle, NOW)
    assert rec.figures.keep_machines == 5  # 600/h: the 6 h window's 1200/h is a day's peak, not a lull
    assert len(rec.removals_of("drain")) == 7
    # the same windows without a slope are a lull: the last startup time (1.5 h: the last hour at 600/h, half an
    # hour at the rest of the 6 h window's 1320/h) is 840/h, 7 machines, kept with a 20% margin
    lull = [window(900, 400), window(3600, 600), window(21600, 1200)]
    rec = recommend(signal(NOW, rate_per_h=400, windows=lull), idle, NOW)
    assert rec.figures.keep_machines == 7 and len(rec.removals_of("drain")) == 5


def day_ago(level_per_h: float, rates_per_h: list[float]) -> SeasonEcho:
    """demand's echo: the hour before this moment a day ago, and the quarter hours that followed it."""
    return SeasonEcho(
        season_s=86400,
        bucket_s=900,
        starts_at=NOW - timedelta(days=1),
        level_then_per_h=level_per_h,
        rates_then_per_h=rates_per_h,
    )


def test_yesterdays_morning_ramp_launches_before_todays_arrivals_rise() -> None:
    fleet = snapshot(NOW, producing(5, NOW))
    today = signal(NOW, rate_per_h=600, producing_workers=5, windows=[window(900, 600), window(3600, 600)])
    assert recommend(today, fleet, NOW, RULES).is_hold  # nothing in today's own numbers says more is coming
    # yesterday at this time ran at 600/h too, then climbed to 2400/h within two hours
    morning = today.model_copy(update={"season": day_ago(600, [600] * 4 + [1200] * 4 + [2400] * 16)})
    rec = recommend(morning, fleet, NOW, RULES)
    # over [1.5 h, 3.5 h] ahead yesterday averaged (0.5 × 1200 + 1.5 × 2400) / 2 = 2100/h: 18 machines at 120/h
    assert rec.figures.arrival_forecast_per_h == pytest.approx(2100)
    assert rec.figures.season_level_ratio == 1.0
    assert [(plan.reason, plan.count) for plan in rec.launches] == [(LaunchReason.FORECAST, 13)]
    assert "a day ago's shape ×1.00" in rec.explanation


def test_yesterdays_evening_lets_idle_machines_go_that_the_look_back_would_keep() -> None:
    idle = snapshot(NOW, producing(20, NOW, last_task_ago_s=2400))
    # 1200/h now, 2400/h over the last six hours: looking back, a startup's worth of that busier past is kept
    today = signal(NOW, rate_per_h=1200, windows=[window(900, 1200), window(3600, 1200), window(21600, 2400)])
    kept = recommend(today, idle, NOW)
    assert kept.figures.keep_machines == 14
    # yesterday's evening: twice today's level then, falling to a quarter of it: today's own rate is the floor
    evening = today.model_copy(update={"season": day_ago(2400, [2400] * 2 + [600] * 22)})
    rec = recommend(evening, idle, NOW)
    assert rec.figures.season_level_ratio == 0.5 and rec.figures.keep_machines == 10
    assert len(rec.removals) == 10 > len(kept.removals)
    # today five times busier than that day: its shape at the upper bound (×2, 480/h, flat), so today's own
    # 1200/h is the floor, as on the evening above; the busier past of the look-back no longer keeps 14
    busy_day = recommend(today.model_copy(update={"season": day_ago(240, [240] * 24)}), idle, NOW)
    assert busy_day.figures.season_level_ratio == 2.0 and busy_day.figures.keep_machines == 10


def test_a_day_far_busier_than_the_last_keeps_its_shape_instead_of_extrapolating_the_ramp() -> None:
    """Today's last hour at 2.5 × the same hour a day ago, arrivals climbing 1500/h per hour: without the echo the
    slope is extrapolated to twice today's rate; a day ago's next hours flattened and fell, and that shape, at the
    upper bound of the ratio, plans today's own rate (growth train seed 102 planned 12,000/h at a 5,800/h peak)."""
    ramp = signal(
        NOW,
        rate_per_h=2500,
        producing_workers=20,
        windows=[window(900, 2500, trend_per_h2=1500), window(3600, 2200, trend_per_h2=1500)],
    )
    fleet = snapshot(NOW, producing(20, NOW))
    extrapolated = recommend(ramp, fleet, NOW)
    assert extrapolated.figures.season_level_ratio is None and extrapolated.figures.arrival_forecast_per_h == 5000
    echo = day_ago(1000, [1000] * 4 + [900] * 8 + [600] * 12)
    shaped = recommend(ramp.model_copy(update={"season": echo}), fleet, NOW)
    assert shaped.figures.season_level_ratio == 2.0 and shaped.figures.arrival_forecast_per_h == 2500
    assert 0 < shaped.launch_count < extrapolated.launch_count
    assert "a day ago's shape ×2.00" in shaped.explanation


def test_todays_level_is_its_last_quarter_hour_against_that_days_rate_at_the_same_time() -> None:
    """The ratio that scales a day ago's shape compares like with like: today's last quarter hour against that
    day's rate at the same time, read between the hour before the echo (its middle 30 min back) and the echo's first
    quarter hour (its middle 7.5 min ahead). growth train seed 102 outgrew the day before by more each hour, and
    read from the last hour its launches came an hour late, with the peak."""
    fleet = snapshot(NOW, producing(10, NOW))
    # a day ago: 1000/h over the hour before, 1400/h in the quarter hour after; at today's window's middle
    # (7.5 min back) that day ran at 1000 + 1350/2250 × 400 = 1240/h
    echo = day_ago(1000, [1400] * 4 + [2000] * 20)
    same_day = signal(NOW, rate_per_h=1240, windows=[window(900, 1240), window(3600, 1100)])
    repeated = recommend(same_day.model_copy(update={"season": echo}), fleet, NOW)
    assert repeated.figures.season_level_ratio == pytest.approx(1.0)  # the last hour read it 1.1, a busier day
    # the same ramp climbing faster today: its last quarter hour at 1.5 × that day's, while its last hour is
    # only 1.2 × that day's hour before
    faster = signal(NOW, rate_per_h=1860, windows=[window(900, 1860), window(3600, 1200)])
    rec = recommend(faster.model_copy(update={"season": echo}), fleet, NOW)
    assert rec.figures.season_level_ratio == pytest.approx(1.5)
    assert rec.figures.arrival_forecast_per_h == pytest.approx(1.5 * 2000)
    # read from the hour, the same signal planned a fifth less
    by_hour_config = PolicyConfig(season_level_window_s=3600.0)
    by_hour = recommend(faster.model_copy(update={"season": echo}), fleet, NOW, by_hour_config)
    assert by_hour.figures.season_level_ratio == pytest.approx(1.2)
    assert by_hour.launch_count < rec.launch_count


def test_a_queue_that_stopped_today_launches_nothing_for_yesterdays_shape() -> None:
    quiet = signal(NOW, rate_per_h=0, windows=[window(900, 0), window(3600, 0)])
    echo = quiet.model_copy(update={"season": day_ago(3000, [3000] * 24)})
    rec = recommend(echo, snapshot(NOW, []), NOW)
    assert rec.is_hold and rec.figures.season_level_ratio is None


def test_a_burst_of_22_tasks_on_a_cold_start_launches_only_what_clears_them_within_the_startup_horizon() -> None:
    # the manual test that once launched 10 GPUs: 22 `submitted` events within a minute, no machine at all, the
    # real demand core reading them; the decider runs every minute for two hours and its launches load
    demand, start = DemandCore(), NOW - timedelta(minutes=1)
    for i in range(22):
        at = start + timedelta(seconds=2.5 * i)
        submitted = TaskEvent(event_id=f"burst-{i}", occurred_at=at, source="jobs", kind="submitted",
                              task_id=f"task-{i}", task_type="default")  # fmt: skip
        demand.ingest(submitted, at)
    fleet: list = []
    launched = []
    for minute in range(120):
        now = NOW + timedelta(minutes=minute)
        depth = QueueDepth(task_type="default", pending=22, running=0)
        queue = QueueSnapshot(occurred_at=now, source="jobs", queues=[depth])
        demand.observe_queue(queue, now)
        rec = recommend(demand.evaluate(now).signal, snapshot(now, fleet), now)
        launched += [(minute, plan) for plan in rec.launches]
        fleet += loading(rec.launch_count, now, first_id=500 + len(fleet), created_ago_s=0)
        fleet = [line.model_copy() for line in fleet]
    # one machine clears 22 tasks in 11 minutes, well within the 1.5 h it takes to land: one emergency launch
    assert [(minute, plan.count, plan.launch_priority) for minute, plan in launched] == [(0, 1, "emergency")]


def test_one_outlier_queue_snapshot_then_a_normal_one_launches_at_most_a_small_step() -> None:
    """The incident: a snapshot of 99,999 pending on a fleet of 4 serving 30 queued (still under demand's
    plausibility ceiling), then normal snapshots again. The real demand core reads them, the policy sizes from its
    signal each minute: the outlier alone may move the fleet by the unconfirmed step, never by its size."""
    demand = DemandCore()
    fleet = producing(4, NOW)
    launched = 0
    for minute, pending in enumerate([30, 30, 99_999, 30, 30, 30]):
        now = NOW + timedelta(minutes=minute)
        depth = QueueDepth(task_type="default", pending=pending, running=4)
        demand.observe_queue(QueueSnapshot(occurred_at=now, source="jobs", queues=[depth]), now)
        seen = demand.evaluate(now).signal
        assert seen.pending_tasks <= 30 + demand.config.unconfirmed_rise_tasks
        launched += recommend(seen, snapshot(now, fleet), now).launch_count
    # the step is 240 tasks, 2 worker-hours: a few machines at most, where 99,999 tasks asked for hundreds
    assert launched <= 3


def test_a_queue_rise_seen_twice_is_counted_whole() -> None:
    demand = DemandCore()
    counted = []
    for minute, pending in enumerate([30, 5000, 5000]):
        now = NOW + timedelta(minutes=minute)
        depth = QueueDepth(task_type="default", pending=pending, running=0)
        demand.observe_queue(QueueSnapshot(occurred_at=now, source="jobs", queues=[depth]), now)
        counted.append(demand.evaluate(now).signal.pending_tasks)
    assert counted == [30, 30 + demand.config.unconfirmed_rise_tasks, 5000]
    back = restored(saved_of(demand))  # what was reported survives a restart
    assert back.queue == demand.queue


def test_loading_machines_the_demand_no_longer_needs_are_given_back() -> None:
    # nine machines loading for a burst that is over: the 22 tasks queued need one of them, and twice that is kept
    fleet = snapshot(NOW, loading(9, NOW, created_ago_s=1200))
    over = signal(NOW, pending=22, rate_per_h=0, windows=[window(900, 0), window(3600, 88), window(21600, 88)])
    rec = recommend(over, fleet, NOW)
    assert rec.launches == ()
    assert [(plan.verb, plan.reason) for plan in rec.removals] == [("destroy", RemovalReason.OVER_PROVISIONED)] * 7
    assert rec.figures.keep_machines == 1
    # while arrivals still come faster than the last hour's, nothing on the way is given back
    rising = signal(NOW, pending=22, rate_per_h=88, windows=[window(900, 120), window(3600, 88), window(21600, 88)])
    assert not recommend(rising, fleet, NOW).removals_of("destroy")


def test_a_burst_the_fleet_clears_within_the_startup_horizon_launches_nothing() -> None:
    fleet = snapshot(NOW, producing(10, NOW))  # 1200 tasks/h
    # 300 tasks queued by a burst two minutes old; the usual 1000/h leave 200/h to clear them: 1.5 h
    burst = signal(NOW, pending=300, rate_per_h=1000, producing_workers=10, above_capacity_for_s=120,
                   state=DemandState.UNDER_PROVISIONED)  # fmt: skip
    assert recommend(burst, fleet, NOW).is_hold


def test_a_flash_crowd_launches_at_the_first_run_that_sees_it_and_more_as_it_lasts() -> None:
    fleet = snapshot(NOW, producing(10, NOW))  # 1200 tasks/h, enough until now
    counts = []
    for minutes_old, pending, rate in ((2, 200, 1600), (5, 500, 2400), (10, 1000, 3600)):
        crowd = signal(NOW, pending=pending, rate_per_h=rate, producing_workers=10,
                       above_capacity_for_s=minutes_old * 60, state=DemandState.UNDER_PROVISIONED)  # fmt: skip
        rec = recommend(crowd, fleet, NOW, RULES)
        assert [plan.reason for plan in rec.launches] == [LaunchReason.BACKLOG], rec.explanation
        # sized by what will be left when machines land (the queue, plus the surge for as long again as it
        # lasted), cleared within the surge's drain target
        left = pending + (rate - 1200) * minutes_old / 60
        config = PolicyConfig()
        need = math.ceil(left / (120 * config.surge_drain_target_s / 3600) - 0.1)
        assert rec.launch_count == min(need, config.max_launches_per_decision)
        counts.append(rec.launch_count)
    assert counts == sorted(counts) and counts[0] < counts[-1]
    # once it has lasted `sustained_for_s`, the rate itself is planned for
    sustained = signal(NOW, pending=2000, rate_per_h=7200, producing_workers=10, above_capacity_for_s=900)
    assert recommend(sustained, fleet, NOW, RULES).launches[0].reason is LaunchReason.SUSTAINED_DEMAND


def test_a_silent_producer_is_not_idle_while_tasks_wait_for_the_fleet() -> None:
    """The busy demo drained a producer, then parked it, with 321 tasks queued and arrivals at the fleet's capacity:
    a slow machine whose pipelined tasks finish together was silent for longer than the idle time, which counts
    2.5 of the fleet's mean task durations, not its own. With tasks waiting for the fleet a healthy worker has work:
    a silent one is slow, or stalled (replaced once demand says so), unless it has taken none for an hour. With the
    queue empty it is idle."""
    busy = producing(6, NOW, last_task_ago_s=30)
    slow = line(200, InstanceState.PRODUCING, NOW, last_task_ago_s=720, price_usd_per_h=0.19, throughput_per_h=40)
    coming = loading(8, NOW, created_ago_s=1800)
    queued = signal(NOW, rate_per_h=840, pending=321, producing_workers=7, above_capacity_for_s=0,
                    windows=[window(300, 840), window(3600, 840), window(7200, 800)])  # fmt: skip
    fleet = snapshot(NOW, [*busy, slow, *coming])
    for config in (PolicyConfig(), ON_DEMAND):
        rec = recommend(queued, fleet, NOW, config)
        assert not [plan for plan in rec.removals if plan.instance_id == 200], rec.explanation
    # the queue gone, the same silence is idle, and the fleet with eight on the way has room to give it back
    drained = signal(NOW, rate_per_h=840, pending=0, producing_workers=7,
                     windows=[window(300, 840), window(3600, 840), window(7200, 800)])  # fmt: skip
    rec = recommend(drained, fleet, NOW, ON_DEMAND)
    assert [(plan.verb, plan.instance_id) for plan in rec.removals if plan.verb == "drain"] == [("drain", 200)]
    # a worker that has taken none of the waiting work for an hour (tasks of a type it does not run) is idle too
    deaf = slow.model_copy(update={"last_task_at": NOW - timedelta(seconds=ON_DEMAND.idle_while_queued_s + 60)})
    rec = recommend(queued, snapshot(NOW, [*busy, deaf, *coming]), NOW, ON_DEMAND)
    assert [(plan.verb, plan.instance_id) for plan in rec.removals if plan.verb == "drain"] == [("drain", 200)]
