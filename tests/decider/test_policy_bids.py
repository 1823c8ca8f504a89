"""Bids set from how the market treated ours: the markup of an interruptible launch rises with the outbid rate
fleet observed for its GPU models, and above what the cap pays for the launch is on-demand."""

from __future__ import annotations

import pytest

from services.decider.policy import PolicyConfig, recommend
from services.decider.policy.bids import bid_choice
from shared.contract.fleet import BidOutcome
from tests.decider.factories import producing, snapshot
from tests.decider.test_policy_parking import NOW, rising

BIDDING = PolicyConfig(bid_share=0.5)
DAY_S = 24 * 3600.0


def outcome(machine_h: float, pauses: int, gpu_model: str = "RTX 4090") -> BidOutcome:
    return BidOutcome(gpu_model=gpu_model, interruptible_machine_h=machine_h, outbid_pauses=pauses, window_s=DAY_S)


def test_bids_never_outbid_keep_the_base_markup_and_so_do_too_few_hours_to_judge() -> None:
    assert bid_choice([outcome(200, 0)], (), BIDDING).markup == BIDDING.bid_markup
    few = bid_choice([outcome(BIDDING.bid_min_observed_machine_h / 2, 2)], (), BIDDING)
    assert few.markup == BIDDING.bid_markup and "too few to judge" in few.describe()
    assert bid_choice([], (), BIDDING).markup == BIDDING.bid_markup


def test_each_doubling_of_the_outbid_rate_above_the_target_raises_the_markup_a_step() -> None:
    target = BIDDING.bid_outbid_target_per_h
    at_target = bid_choice([outcome(100, round(100 * target))], (), BIDDING)
    assert at_target.markup == BIDDING.bid_markup
    twice = bid_choice([outcome(100, round(200 * target))], (), BIDDING)
    assert twice.markup == pytest.approx(BIDDING.bid_markup + BIDDING.bid_markup_step)
    five_times = bid_choice([outcome(100, round(500 * target))], (), BIDDING)  # 2² < 5 ≤ 2³
    assert five_times.markup == pytest.approx(BIDDING.bid_markup + 3 * BIDDING.bid_markup_step)
    assert five_times.outbid_rate_per_h == pytest.approx(5 * target)


def test_a_rate_beyond_what_the_cap_pays_for_means_no_bids() -> None:
    steps_to_cap = round((BIDDING.bid_markup_cap - BIDDING.bid_markup) / BIDDING.bid_markup_step)
    give_up_per_h = BIDDING.bid_outbid_target_per_h * 2**steps_to_cap
    assert bid_choice([outcome(100, round(100 * give_up_per_h))], (), BIDDING).markup == pytest.approx(
        BIDDING.bid_markup_cap
    )
    beyond = bid_choice([outcome(100, round(100 * give_up_per_h * 1.5))], (), BIDDING)
    assert beyond.markup is None and beyond.describe().startswith("no bids")


def test_only_the_launch_s_gpu_models_count_and_every_model_when_it_names_none() -> None:
    outcomes = [outcome(100, 0, "RTX 4090"), outcome(100, 100, "RTX 3090")]
    assert bid_choice(outcomes, ("RTX 4090",), BIDDING).markup == BIDDING.bid_markup
    assert bid_choice(outcomes, ("RTX 3090",), BIDDING).markup is None  # one pause an hour
    assert bid_choice(outcomes, (), BIDDING).outbid_rate_per_h == pytest.approx(0.5)


def test_a_launch_bids_higher_after_pauses_and_says_at_what_and_why() -> None:
    demand = rising(1920)
    calm = recommend(demand, snapshot(NOW, producing(4, NOW)), NOW, BIDDING)
    outbid_often = snapshot(NOW, producing(4, NOW)).model_copy(update={"bid_outcomes": [outcome(50, 15)]})
    rec = recommend(demand, outbid_often, NOW, BIDDING)
    [plan] = rec.launches
    [calm_plan] = calm.launches
    assert plan.interruptible == calm_plan.interruptible > 0
    assert calm_plan.bid_markup == BIDDING.bid_markup
    # 0.3 an hour: three times the target, between two and four: two steps up
    assert plan.bid_markup == pytest.approx(BIDDING.bid_markup + 2 * BIDDING.bid_markup_step)
    assert "bids at min_bid × 1.30: 15 outbid pauses in 50 interruptible machine-h (0.300/h)" in rec.explanation


def test_a_launch_is_on_demand_where_the_market_outbids_every_bid_worth_making() -> None:
    demand = rising(1920)
    hopeless = snapshot(NOW, producing(4, NOW)).model_copy(update={"bid_outcomes": [outcome(10, 10)]})
    rec = recommend(demand, hopeless, NOW, BIDDING)
    assert rec.launches and all(plan.interruptible == 0 for plan in rec.launches)
    assert "no bids: 10 outbid pauses in 10 interruptible machine-h" in rec.explanation
