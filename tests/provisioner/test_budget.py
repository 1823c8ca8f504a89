"""The budget core: whole launches fit or are refused, single rents are checked, and a property over sequences."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.provisioner.budget import (
    BudgetLimits,
    Commitment,
    DaySpend,
    Refusal,
    commitment_of,
    day_refusal,
    fits,
    pick_next,
    plan_launch,
    pull_breaks_the_day,
    resume_refusal,
)
from services.provisioner.ranking import RankedOffer
from services.provisioner.vast_models import VastOffer
from shared.contract import InstanceState, RefusalRule

LIMITS = BudgetLimits(
    budget_usd_per_h=2.0,
    max_instances=4,
    normal_max_price_usd_per_h=0.8,
    emergency_max_price_usd_per_h=1.2,
    price_margin=0.0,
)


def ranked(*prices: float) -> list[RankedOffer]:
    """Offers in rank order (the rank is given, not computed, so the budget is tested alone)."""
    return [
        RankedOffer(VastOffer(id=i + 1, gpu_name="RTX 4090", dph_total=p), 120.0, 1.0, p / 120.0)
        for i, p in enumerate(prices)
    ]


def test_price_cap_depends_on_priority_and_a_command_can_only_lower_it() -> None:
    assert LIMITS.price_cap("normal") == 0.8
    assert LIMITS.price_cap("emergency") == 1.2
    assert LIMITS.price_cap("emergency", 0.5) == 0.5
    assert LIMITS.price_cap("normal", 3.0) == 0.8


def test_commitment_counts_every_instance_that_is_not_gone() -> None:
    states = [(0.5, InstanceState.RUNNING), (0.4, InstanceState.FAILED), (0.3, InstanceState.DRAINING)]
    assert commitment_of([*states, (9.0, InstanceState.GONE)]) == Commitment(1.2, 3)


def test_a_launch_that_fits_is_planned_in_rank_order() -> None:
    plan = plan_launch(LIMITS, Commitment(0.5, 1), ranked(0.6, 0.5, 0.7), 2)
    assert not isinstance(plan, Refusal)
    assert [r.offer.id for r in plan] == [1, 2]


def test_too_many_instances_is_refused_whole() -> None:
    plan = plan_launch(LIMITS, Commitment(0.3, 3), ranked(0.1, 0.1), 2)
    assert isinstance(plan, Refusal) and plan.rule is RefusalRule.MAX_INSTANCES


def test_over_budget_is_refused_whole_even_when_part_would_fit() -> None:
    plan = plan_launch(LIMITS, Commitment(1.0, 1), ranked(0.6, 0.6), 2)
    assert isinstance(plan, Refusal) and plan.rule is RefusalRule.BUDGET_USD_PER_H
    assert "1.00" in plan.detail and "2.00" in plan.detail


def test_not_enough_offers_is_refused() -> None:
    plan = plan_launch(LIMITS, Commitment(), ranked(0.3), 2)
    assert isinstance(plan, Refusal) and plan.rule is RefusalRule.NO_OFFER


def test_greedy_by_rank_never_paints_itself_into_a_corner() -> None:
    # the best-ranked offer (1.2) plus any other would not fit 1.5; the cheaper pair does
    plan = plan_launch(LIMITS, Commitment(0.5, 0), ranked(1.2, 0.5, 0.4), 2)
    assert not isinstance(plan, Refusal)
    assert [r.offer.id for r in plan] == [2, 3]


def test_the_price_margin_is_reserved() -> None:
    with_margin = BudgetLimits(2.0, 4, 0.8, 1.2, price_margin=0.1)
    assert fits(with_margin, Commitment(1.0, 0), 0.9)
    assert not fits(with_margin, Commitment(1.1, 0), 0.9)  # 1.1 + 0.99 > 2.0
    assert pick_next(with_margin, Commitment(1.1, 0), ranked(0.9), 1) is None


@st.composite
def commands(draw: st.DrawFn) -> list[tuple[str, int]]:
    return draw(
        st.lists(
            st.tuples(st.sampled_from(["launch", "stop", "destroy"]), st.integers(min_value=1, max_value=5)),
            max_size=12,
        )
    )


@settings(max_examples=300, deadline=None)
@given(
    budget_usd_per_h=st.floats(min_value=0.2, max_value=5.0),
    max_instances=st.integers(min_value=0, max_value=6),
    margin=st.sampled_from([0.0, 0.05]),
    markets=st.lists(st.lists(st.floats(min_value=0.05, max_value=1.5), max_size=8), min_size=1, max_size=4),
    sequence=commands(),
)
def test_no_sequence_of_commands_and_market_states_exceeds_the_budget(
    budget_usd_per_h: float,
    max_instances: int,
    margin: float,
    markets: list[list[float]],
    sequence: list[tuple[str, int]],
) -> None:
    """Launches through plan_launch and pick_next, stops (still billed) and destroys (freed), on changing markets."""
    limits = BudgetLimits(budget_usd_per_h, max_instances, 0.8, 1.2, price_margin=margin)
    fleet: list[tuple[float, InstanceState]] = []
    for step, (verb, n) in enumerate(sequence):
        market = markets[step % len(markets)]
        if verb == "launch":
            offers = ranked(*market)
            plan = plan_launch(limits, commitment_of(fleet), offers, n)
            if isinstance(plan, Refusal):
                continue
            left = list(offers)
            for still_needed in range(n, 0, -1):
                choice = pick_next(limits, commitment_of(fleet), left, still_needed)
                if choice is None or not fits(limits, commitment_of(fleet), choice.price_usd_per_h):
                    break
                left.remove(choice)
                fleet.append((choice.price_usd_per_h * (1 + margin), InstanceState.REQUESTED))
        else:
            # vast answers no_such_instance for a destroyed one: a stop or destroy never brings it back
            alive = [i for i, (_, state) in enumerate(fleet) if state is not InstanceState.GONE]
            if alive:
                index = alive[n % len(alive)]
                price, _ = fleet[index]
                fleet[index] = (price, InstanceState.DRAINING if verb == "stop" else InstanceState.GONE)
        committed = commitment_of(fleet)
        assert committed.instances <= max_instances
        assert committed.usd_per_h <= budget_usd_per_h + 1e-6


def test_a_resume_is_budgeted_at_its_full_price_less_the_storage_it_commits() -> None:
    # 1.5 committed, of which the parked machine's 0.02 storage: resuming it at 0.5 makes 1.98
    assert resume_refusal(LIMITS, Commitment(1.5, 3), 0.02, 0.5) is None
    refusal = resume_refusal(LIMITS, Commitment(1.6, 3), 0.02, 0.5)
    assert isinstance(refusal, Refusal) and refusal.rule is RefusalRule.BUDGET_USD_PER_H
    assert "$0.50/h" in refusal.detail and "$2.00/h" in refusal.detail
    # the price margin applies as to a launch
    margin = BudgetLimits(**{**LIMITS.__dict__, "price_margin": 0.1})
    assert resume_refusal(margin, Commitment(1.5, 3), 0.02, 0.5) is not None


def test_the_day_accrues_the_committed_rate_and_starts_again_at_midnight_utc() -> None:
    morning = DaySpend.starting(datetime(2026, 3, 2, 6, 0, tzinfo=UTC))
    noon = morning.accrued(2.0, datetime(2026, 3, 2, 12, 0, tzinfo=UTC)).charged(0.5)  # 6 h at $2/h + a pull
    assert noon.spent_usd == pytest.approx(12.5)
    after_midnight = noon.accrued(1.0, datetime(2026, 3, 3, 1, 30, tzinfo=UTC))
    assert (after_midnight.day, after_midnight.spent_usd) == (date(2026, 3, 3), pytest.approx(1.5))


def test_a_rent_that_would_pass_the_daily_cap_by_midnight_is_refused_with_its_rule() -> None:
    capped = BudgetLimits(**{**LIMITS.__dict__, "daily_budget_usd": 20.0})
    at_noon = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # 12 h to midnight UTC
    spent = DaySpend(day=date(2026, 3, 2), spent_usd=6.0, accrued_until=at_noon)
    # 6 + (0.5 + 0.5) x 12 = 18 fits; the same rent with a $3 image pull makes 21
    assert day_refusal(capped, spent, Commitment(0.5, 1), 0.5, 0.0, at_noon) is None
    refusal = day_refusal(capped, spent, Commitment(0.5, 1), 0.5, 3.0, at_noon)
    assert isinstance(refusal, Refusal) and refusal.rule is RefusalRule.DAILY_BUDGET_USD
    assert "$21.00" in refusal.detail and "$20.00" in refusal.detail
    # unset, the cap is the hourly budget all day: $2/h x 24
    assert LIMITS.daily_cap_usd == 48.0 and day_refusal(LIMITS, spent, Commitment(0.5, 1), 0.5, 3.0, at_noon) is None


def test_an_offer_whose_pull_alone_passes_the_daily_cap_is_left_out_not_the_launch() -> None:
    """The pull is the offer's own charge: a host at 50 $/GB (a $500 pull) is no rent today, like one above the
    price cap. A rent whose hourly price alone passes the cap is the launch's refusal, as before."""
    capped = BudgetLimits(**{**LIMITS.__dict__, "daily_budget_usd": 20.0})
    at_noon = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    spent = DaySpend(day=date(2026, 3, 2), spent_usd=6.0, accrued_until=at_noon)
    sane, dear_pull, dear_hours = (
        RankedOffer(
            VastOffer(id=i, gpu_name="RTX 4090", dph_total=price), 120.0, 1.0, price / 120.0, pull_cost_usd=pull
        )
        for i, price, pull in ((1, 0.5, 0.1), (2, 0.5, 500.0), (3, 1.2, 0.1))
    )
    commitment = Commitment(0.5, 1)
    assert not pull_breaks_the_day(capped, spent, commitment, sane, at_noon)
    assert pull_breaks_the_day(capped, spent, commitment, dear_pull, at_noon)
    # 6 + (0.5 + 1.2) x 12 = 26.4: over the cap by its hours, not its pull
    assert not pull_breaks_the_day(capped, spent, commitment, dear_hours, at_noon)
