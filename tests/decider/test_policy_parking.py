"""Parking and bids in the predictive policy: a producer the demand no longer needs is drained and stopped with its disk
kept, parked machines are resumed before anything new is launched, and given back after `park_max_s`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.decider.config import DeciderSettings
from services.decider.decision import policy_actions
from services.decider.policy import PolicyConfig, recommend
from shared.contract import (
    DemandSignal,
    FailureReason,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    ParkReason,
    RemovalReason,
    ResumeInstance,
)
from shared.settings import Settings
from tests.decider.factories import HOUR_S, line, producing, signal, snapshot, window

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
PARKING = PolicyConfig(park=True)


def parked(instance_id: int, parked_for_s: float) -> InstanceLine:
    stopped = line(instance_id, InstanceState.PARKED, NOW, state_for_s=parked_for_s, last_task_ago_s=parked_for_s)
    return stopped.model_copy(update={"park_reason": ParkReason.STOPPED})


def test_surplus_producers_are_drained_to_be_parked_and_stopped_once_drained() -> None:
    busy = [line(100 + i, InstanceState.PRODUCING, NOW, last_task_ago_s=10 + 10 * i) for i in range(10)]
    quiet = signal(NOW, rate_per_h=240, pending=0, windows=[window(300, 240), window(7200, 240)])
    rec = recommend(quiet, snapshot(NOW, busy), NOW, PARKING)
    assert [(plan.verb, plan.reason) for plan in rec.removals] == [("drain", RemovalReason.PARK)] * 7
    drained = line(300, InstanceState.DRAINING, NOW, state_for_s=900, last_task_ago_s=800)
    rec = recommend(signal(NOW, rate_per_h=120), snapshot(NOW, [*producing(1, NOW), drained]), NOW, PARKING)
    assert [(plan.verb, plan.instance_id, plan.reason) for plan in rec.removals] == [("stop", 300, RemovalReason.PARK)]
    # the audit says the machine stopped had finished draining: it is not taken from the fleet the need counts
    assert rec.explanation.startswith("stop 1 after draining (park): need 1 machines")
    # the default parks too; without parking the same drained machine is given back
    rec = recommend(signal(NOW, rate_per_h=120), snapshot(NOW, [*producing(1, NOW), drained]), NOW)
    assert [(plan.verb, plan.instance_id) for plan in rec.removals] == [("stop", 300)]
    without = PolicyConfig(park=False)
    rec = recommend(signal(NOW, rate_per_h=120), snapshot(NOW, [*producing(1, NOW), drained]), NOW, without)
    assert [(plan.verb, plan.instance_id) for plan in rec.removals] == [("destroy", 300)]


def rising(rate_per_h: float, pending: int = 0) -> DemandSignal:
    """Arrivals above the 4 producers' capacity for an hour: sustained demand, planned from its rate."""
    return signal(
        NOW,
        rate_per_h=rate_per_h,
        pending=pending,
        producing_workers=4,
        above_capacity_for_s=HOUR_S,
        windows=[window(300, rate_per_h), window(3600, rate_per_h)],
    )


def launches_without_parking(demand: DemandSignal) -> int:
    return recommend(demand, snapshot(NOW, producing(4, NOW)), NOW, PARKING).launch_count


def test_parked_machines_cover_the_forecast_and_are_resumed_when_the_next_minutes_need_them() -> None:
    demand = rising(600)
    wanted = launches_without_parking(demand)
    pool = [parked(700 + i, parked_for_s=(i + 1) * HOUR_S) for i in range(wanted + 2)]
    rec = recommend(demand, snapshot(NOW, [*producing(4, NOW), *pool]), NOW, PARKING)
    assert rec.launch_count == 0  # the parked machines cover what new ones would have
    # what the next minutes need (600/h ÷ 120/h = 5 machines, 4 producing): one now, the rest when needed
    assert [plan.instance_id for plan in rec.resumes] == [700]  # the most recently parked first
    assert rec.resumes[0].reason is LaunchReason.SUSTAINED_DEMAND
    actions = policy_actions(rec, "decider-run-1", NOW, "decider")
    assert [a.instance_id for a in actions if isinstance(a, ResumeInstance)] == [700]


def test_more_demand_than_parked_machines_launches_the_rest() -> None:
    demand = rising(1920, pending=100)
    wanted = launches_without_parking(demand)
    pool = [parked(700, HOUR_S), parked(701, 2 * HOUR_S)]
    rec = recommend(demand, snapshot(NOW, [*producing(4, NOW), *pool]), NOW, PARKING)
    assert [plan.instance_id for plan in rec.resumes] == [700, 701]  # both needed at once
    assert rec.launch_count == wanted - 2


def test_a_machine_parked_too_long_is_given_back_and_not_resumed() -> None:
    demand = rising(960)
    stale = parked(700, parked_for_s=PARKING.park_max_s + 60)
    rec = recommend(demand, snapshot(NOW, [*producing(4, NOW), stale]), NOW, PARKING)
    assert [(plan.verb, plan.instance_id, plan.reason) for plan in rec.removals] == [
        ("destroy", 700, RemovalReason.IDLE)
    ]
    assert rec.resumes == () and rec.launch_count == launches_without_parking(demand)


def test_an_outbid_machine_is_not_ours_to_resume() -> None:
    demand = rising(960)
    outbid = parked(700, HOUR_S).model_copy(update={"park_reason": ParkReason.OUTBID})
    rec = recommend(demand, snapshot(NOW, [*producing(4, NOW), outbid]), NOW, PARKING)
    assert rec.resumes == () and rec.launch_count == launches_without_parking(demand)


BIDDING = PolicyConfig(bid_share=0.5)


def test_part_of_a_sustained_rise_is_launched_interruptible() -> None:
    demand = rising(1920)
    rec = recommend(demand, snapshot(NOW, producing(4, NOW)), NOW, BIDDING)
    [plan] = rec.launches
    assert plan.interruptible == plan.count // 2 and plan.bid_markup == BIDDING.bid_markup
    assert f"{plan.interruptible} interruptible" in rec.explanation
    [command] = policy_actions(rec, "decider-run-2", NOW, "decider")
    assert isinstance(command, LaunchInstances) and command.interruptible == plan.interruptible


def test_no_bid_while_the_market_outbids_us_and_a_long_pause_is_given_back() -> None:
    demand = rising(1920)
    paused = parked(800, 10 * 60).model_copy(update={"park_reason": ParkReason.OUTBID})
    rec = recommend(demand, snapshot(NOW, [*producing(4, NOW), paused]), NOW, BIDDING)
    assert rec.launches and all(plan.interruptible == 0 for plan in rec.launches)
    assert rec.removals == ()  # ten minutes: vast may resume it
    long_paused = parked(800, BIDDING.outbid_give_up_s + 60).model_copy(update={"park_reason": ParkReason.OUTBID})
    rec = recommend(demand, snapshot(NOW, [*producing(4, NOW), long_paused]), NOW, BIDDING)
    assert [(plan.verb, plan.reason) for plan in rec.removals] == [("destroy", RemovalReason.OUTBID)]


def test_an_emergency_or_a_replacement_is_never_interruptible() -> None:
    nobody = signal(NOW, pending=40, rate_per_h=600)
    assert all(plan.interruptible == 0 for plan in recommend(nobody, snapshot(NOW, []), NOW, BIDDING).launches)
    dead = line(900, InstanceState.FAILED, NOW, failure_reason=FailureReason.DEAD)
    rec = recommend(rising(960), snapshot(NOW, [*producing(4, NOW), dead]), NOW, BIDDING)
    assert all(plan.interruptible == 0 for plan in rec.replacements)


def test_the_decider_turns_the_levers_on_from_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DeciderSettings().policy_config(Settings()).park  # parking and mpc are on by default, bids are not
    assert PolicyConfig().park and PolicyConfig().bid_share == 0.0 and PolicyConfig().mpc
    monkeypatch.setenv("FLEETPILOT_DECIDER_PARK", "false")
    monkeypatch.setenv("FLEETPILOT_DECIDER_BID_SHARE", "0.5")
    monkeypatch.setenv("FLEETPILOT_DECIDER_MPC", "false")
    config = DeciderSettings().policy_config(Settings())
    assert not config.park and config.bid_share == 0.5 and not config.mpc


def test_a_paused_bids_capacity_is_replaced_at_once_from_the_parked_pool() -> None:
    """vast resumes an outbid machine only when the market lets it: the demand it served is served now, by a
    parked machine (minutes), in the run that sees the pause, even when nothing else calls for a launch."""
    steady = signal(NOW, rate_per_h=600, producing_workers=4, windows=[window(300, 600), window(3600, 600)])
    paused = parked(800, 5 * 60).model_copy(update={"park_reason": ParkReason.OUTBID})
    pool = [parked(700, HOUR_S), parked(701, 2 * HOUR_S)]
    levers = PolicyConfig(park=True, bid_share=0.5)
    rec = recommend(steady, snapshot(NOW, [*producing(4, NOW), paused, *pool]), NOW, levers)
    assert [(plan.instance_id, plan.reason) for plan in rec.resumes] == [(700, LaunchReason.REPLACEMENT)]
    assert rec.removals == ()  # the paused bid is kept: vast may start it again within the give-up time


STANDBY = PolicyConfig(park=True, standby_fraction=1.0)


def steady(rate_per_h: float, producing_workers: int) -> DemandSignal:
    return signal(
        NOW,
        rate_per_h=rate_per_h,
        producing_workers=producing_workers,
        windows=[window(900, rate_per_h), window(3600, rate_per_h), window(21600, rate_per_h)],
    )


def test_a_standby_pool_is_launched_in_a_quiet_run_and_counts_what_is_parked_already() -> None:
    # 4 producers serve 480/h: the demand needs 4; a pool of 1 × 4 lacks 4, then 1 with 3 parked
    fleet = producing(4, NOW)
    rec = recommend(steady(480, 4), snapshot(NOW, fleet), NOW, STANDBY)
    assert [(plan.count, plan.reason) for plan in rec.launches] == [(4, LaunchReason.MINIMUM_FLEET)]
    assert "standby pool short by 4 (×1 of 4 needed)" in rec.explanation
    pool = [parked(200 + i, parked_for_s=20 * HOUR_S) for i in range(3)]
    rec = recommend(steady(480, 4), snapshot(NOW, [*fleet, *pool]), NOW, STANDBY)
    assert [plan.count for plan in rec.launches] == [1]  # parked machines count whole, however long they waited
    rec = recommend(steady(480, 4), snapshot(NOW, [*fleet, *pool, parked(203, 600)]), NOW, STANDBY)
    assert rec.is_hold
    # off by default, and nothing without parking
    assert recommend(steady(480, 4), snapshot(NOW, fleet), NOW).is_hold
    no_parking = PolicyConfig(park=False, standby_fraction=1.0)
    assert recommend(steady(480, 4), snapshot(NOW, fleet), NOW, no_parking).is_hold


def test_the_standby_pool_waits_while_the_demand_launches_and_its_machines_are_not_given_back_while_loading() -> None:
    # a sustained rise launches for the demand: no standby in that run
    rec = recommend(rising(1200), snapshot(NOW, producing(4, NOW)), NOW, STANDBY)
    assert all(plan.reason is not LaunchReason.MINIMUM_FLEET for plan in rec.launches)
    assert "standby" not in rec.explanation
    # 10 machines on the way beside 4 producers that serve the demand: without a pool 6 go back while loading
    # (twice the kept 4 stay: arriving_keep_factor); with a pool of 2 × 4, its 8 stay until they produce (then,
    # idle, they are parked like any surplus producer)
    on_the_way = [
        line(500 + i, InstanceState.LOADING, NOW, created_ago_s=1800 - i, state_for_s=1800 - i, last_task_ago_s=None)
        for i in range(10)
    ]
    fleet = snapshot(NOW, [*producing(4, NOW), *on_the_way])
    assert len(recommend(steady(480, 4), fleet, NOW, PARKING).removals) == 6
    assert len(recommend(steady(480, 4), fleet, NOW, PolicyConfig(park=True, standby_fraction=2.0)).removals) == 2


def test_the_standby_fraction_is_a_decider_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETPILOT_DECIDER_STANDBY_FRACTION", "1.5")
    assert DeciderSettings().policy_config(Settings()).standby_fraction == 1.5
    monkeypatch.setenv("FLEETPILOT_DECIDER_STANDBY_FRACTION", "-1")
    with pytest.raises(ValueError, match="standby_fraction"):
        DeciderSettings()
