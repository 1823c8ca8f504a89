"""The expected-cost launch choice (services/decider/policy/mpc.py): a pure function of the signal and the fleet,
a sustained deficit launched in full, a young surge hedged rather than launched for, and the explanation."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from services.decider.policy import PolicyConfig
from services.decider.policy.fleet_view import split_fleet
from services.decider.policy.mpc import (
    SURGE_REMAINING_AGES,
    MpcChoice,
    capacity_path,
    choose_launches,
    expected_usd,
    scenarios,
)
from services.decider.policy.predictive import recommend
from services.decider.policy.sizing import size
from shared.contract import DemandState, LaunchReason
from tests.decider.factories import HOUR_S, loading, producing, signal, snapshot, window

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MPC = PolicyConfig(mpc=True)


def _sized(demand_signal, fleet_snapshot, config=MPC):  # type: ignore[no-untyped-def]
    return size(demand_signal, split_fleet(fleet_snapshot), NOW, config, unobserved_launches=0)


def test_the_choice_is_a_pure_function_of_its_inputs() -> None:
    demand = signal(NOW, rate_per_h=1200, pending=300, above_capacity_for_s=HOUR_S, producing_workers=4)
    fleet = snapshot(NOW, producing(4, NOW))
    first = recommend(demand, fleet, NOW, MPC)
    again = recommend(demand, fleet, NOW, MPC)
    assert first == again
    assert first.launch_count > 0


def test_a_sustained_deficit_is_launched_for_and_no_launch_when_the_fleet_serves_the_demand() -> None:
    # 1200 tasks/h sustained for an hour against 4 machines at 120/h: the deficit is 6 machines at least
    demand = signal(NOW, rate_per_h=1200, pending=300, above_capacity_for_s=HOUR_S, producing_workers=4)
    sized = _sized(demand, snapshot(NOW, producing(4, NOW)))
    choice = choose_launches(sized, 1200, MPC, price_usd_per_h=0.5)
    assert choice.launches >= 6
    assert choice.expected_usd < choice.hold_usd
    served = signal(NOW, rate_per_h=400, pending=0, producing_workers=5)
    assert choose_launches(_sized(served, snapshot(NOW, producing(5, NOW))), 400, MPC, 0.5).launches == 0


def test_a_young_surge_buys_a_hedge_not_the_whole_crowd() -> None:
    """Arrivals jumped to 3,600/h two minutes ago over 5 machines serving 600/h: the scenarios give the surge a
    small chance of outlasting a startup, so the launch is a fraction of what the crowd would need if it stayed;
    the same surge 14 minutes old (not yet sustained) is launched for more."""
    fleet = snapshot(NOW, producing(5, NOW))
    windows = [window(60, 3600), window(900, 700), window(3600, 600)]

    def surge(age_s: float) -> int:
        demand = signal(NOW, rate_per_h=600, pending=200, windows=windows, above_capacity_for_s=age_s,
                        producing_workers=5)  # fmt: skip
        sized = _sized(demand, fleet)
        assert not sized.planned_from_rate
        return choose_launches(sized, 3600, MPC, price_usd_per_h=0.5).launches

    whole_crowd = (3600 - 600) / 120  # 25 machines if it lasted
    young, older = surge(120), surge(840)
    assert young < whole_crowd / 2
    assert older > young


def test_surge_scenarios_weigh_its_remaining_life_by_its_age() -> None:
    demand = signal(NOW, rate_per_h=600, pending=0, windows=[window(60, 3000), window(3600, 600)],
                    above_capacity_for_s=600, producing_workers=5)  # fmt: skip
    sized = _sized(demand, snapshot(NOW, producing(5, NOW)))
    assert len(scenarios(sized, 3000, MPC)) == len(SURGE_REMAINING_AGES)  # the level's spread off by default
    paths = scenarios(sized, 3000, replace(MPC, level_spread_fraction=0.2))
    assert len(paths) == len(SURGE_REMAINING_AGES) * 3
    assert abs(sum(p.weight for p in paths) - 1.0) < 1e-9
    # the longest-lived surge runs at the surge's rate longer than the shortest
    surge_steps = sorted(int(sum(1 for rate in p.rates_per_h if rate >= 2999)) for p in paths if "×" not in p.name)
    assert surge_steps == sorted(surge_steps) and surge_steps[0] < surge_steps[-1]


def test_machines_on_the_way_count_at_their_models_pace() -> None:
    """4 RTX 5090s produce; 6 RTX 3090s (0.4 of a 5090 in the catalog) are on the way for a sustained 1,300/h.
    Counted at the producers' pace they would look like enough; at their own they are not, and more machines are
    launched than for the same fleet with 5090s on the way."""
    demand = signal(NOW, rate_per_h=1300, pending=300, above_capacity_for_s=HOUR_S, producing_workers=4)
    fast = producing(4, NOW, gpu_model="RTX 5090", throughput_per_h=160.0)

    def launches(arriving_model: str) -> tuple[int, float]:
        fleet = snapshot(NOW, fast + loading(6, NOW, gpu_model=arriving_model))
        sized = _sized(demand, fleet)
        return choose_launches(sized, 1300, MPC, price_usd_per_h=0.3).launches, sum(sized.arriving_weights)

    slow_launches, slow_worth = launches("RTX 3090")
    fast_launches, fast_worth = launches("RTX 5090")
    assert fast_worth == 6.0 and 2.0 < slow_worth < 3.0
    assert slow_launches >= fast_launches + 3
    rec = recommend(demand, snapshot(NOW, fast + loading(6, NOW, gpu_model="RTX 3090")), NOW, MPC)
    assert "6 arriving (worth 2.4 at their models' pace)" in rec.explanation


def test_expected_cost_falls_then_rises_with_the_launch_count() -> None:
    demand = signal(NOW, rate_per_h=1200, pending=300, above_capacity_for_s=HOUR_S, producing_workers=4)
    sized = _sized(demand, snapshot(NOW, producing(4, NOW)))
    paths = scenarios(sized, 1200, MPC)
    base = capacity_path(sized, MPC)
    totals = [expected_usd(sized, paths, base, MPC, 0.5, launches) for launches in range(31)]
    best = totals.index(min(totals))
    assert choose_launches(sized, 1200, MPC, 0.5).launches == best  # the search stops at the minimum
    assert 0 < best < 30
    assert all(totals[i] >= totals[i + 1] - 1e-6 for i in range(best))
    assert all(totals[i] <= totals[i + 1] + 1e-6 for i in range(best, 30))


def test_dearer_waiting_buys_more_machines() -> None:
    demand = signal(NOW, rate_per_h=600, pending=0, windows=[window(60, 2400), window(3600, 600)],
                    above_capacity_for_s=600, producing_workers=5)  # fmt: skip
    sized = _sized(demand, snapshot(NOW, producing(5, NOW)))
    cheap = choose_launches(sized, 2400, replace(MPC, delay_usd_per_task_h=0.01), 0.5).launches
    dear = choose_launches(sized, 2400, replace(MPC, delay_usd_per_task_h=1.0), 0.5).launches
    assert dear > cheap


def test_the_explanation_names_the_expected_costs() -> None:
    demand = signal(NOW, rate_per_h=1200, pending=300, above_capacity_for_s=HOUR_S, producing_workers=4)
    rec = recommend(demand, snapshot(NOW, producing(4, NOW)), NOW, MPC)
    assert "expected $" in rec.explanation and "holding on the forecast at $" in rec.explanation
    assert f"launch {rec.launch_count}" in rec.explanation
    assert "1 scenarios" not in rec.explanation and "worst without" not in rec.explanation


def test_the_explanation_names_the_scenarios_and_the_worst_when_there_are_several() -> None:
    many = MpcChoice(launches=3, expected_usd=40, hold_usd=90, driver="surge ends in 2h", scenarios=5,
                     price_usd_per_h=0.5)  # fmt: skip
    assert many.describe() == (
        "; launch 3: expected $40 against $90 holding over 5 scenarios (worst without: surge ends in 2h) at $0.50/h"
        " each"
    )
    assert replace(many, launches=0).describe() == "; expected cost $90 over 5 scenarios, no launch pays"
    assert replace(many, launches=0, scenarios=1).describe() == "; expected cost $90 on the forecast, no launch pays"


def test_a_flash_crowd_is_hedged_at_the_first_run_and_launched_for_more_as_it_lasts() -> None:
    """The default policy (mpc on): the crowd's first run launches at least one machine, never the whole crowd's
    need, and each later run that sees it still going launches more; once sustained, the rate is planned for."""
    fleet = snapshot(NOW, producing(10, NOW))  # 1200 tasks/h, enough until now
    counts = []
    for minutes_old, pending, rate in ((2, 200, 1600), (5, 500, 2400), (10, 1000, 3600)):
        windows = [window(60, rate), window(900, 1200 + (rate - 1200) * minutes_old / 15), window(3600, 1200)]
        crowd = signal(NOW, pending=pending, rate_per_h=1200, windows=windows, producing_workers=10,
                       above_capacity_for_s=minutes_old * 60, state=DemandState.UNDER_PROVISIONED)  # fmt: skip
        rec = recommend(crowd, fleet, NOW)
        assert [plan.reason for plan in rec.launches] == [LaunchReason.BACKLOG], rec.explanation
        counts.append(rec.launch_count)
    assert 1 <= counts[0] < (1600 - 1200) / 120 + 200 / 120  # a hedge: less than the crowd needs if it stayed
    assert counts == sorted(counts) and counts[0] < counts[-1]
    sustained = signal(NOW, pending=2000, rate_per_h=7200, producing_workers=10, above_capacity_for_s=900)
    assert recommend(sustained, fleet, NOW).launches[0].reason is LaunchReason.SUSTAINED_DEMAND


def test_capacity_lost_while_arrivals_hold_is_replaced_not_taken_for_a_surge() -> None:
    """Two of four producers failed under a steady 480 tasks/h: the arrivals were served before, so the two are
    replaced (a surge hypothesis would have them ending within minutes and launch one)."""
    from services.decider.policy.mpc import choose_launches as choose
    from shared.contract import FailureReason, InstanceState
    from tests.decider.factories import line

    failed = [line(900 + i, InstanceState.FAILED, NOW, failure_reason=FailureReason.DEAD) for i in range(2)]
    demand = signal(NOW, rate_per_h=480, producing_workers=2, above_capacity_for_s=120)
    rec = recommend(demand, snapshot(NOW, [*producing(2, NOW), *failed]), NOW, MPC)
    assert rec.replacements and rec.replacements[0].count == 2, rec.explanation
    sized = _sized(demand, snapshot(NOW, [*producing(2, NOW), *failed]))
    assert choose(sized, 480, MPC, 0.5, lost_machines=0).launches < 2  # without the lost ones: read as a surge


def test_machines_on_the_way_are_kept_by_the_same_expected_cost_that_launched_them() -> None:
    """What the choice launched, the next run's scale-down does not give back while the demand it was launched
    for still stands; a surplus beyond it is given back, the last to land first."""
    from services.decider.policy.mpc import on_the_way_kept
    from tests.decider.factories import loading

    demand = signal(NOW, rate_per_h=1200, pending=300, above_capacity_for_s=HOUR_S, producing_workers=4)
    first = recommend(demand, snapshot(NOW, producing(4, NOW)), NOW, MPC)
    launched = first.launch_count
    assert launched > 0
    # the next run, a minute on: the same demand, those machines loading
    on_the_way = snapshot(NOW, [*producing(4, NOW), *loading(launched, NOW, created_ago_s=60)])
    assert on_the_way_kept(_sized(demand, on_the_way), 1200, MPC, 0.5) == launched
    again = recommend(demand, on_the_way, NOW, MPC)
    assert not [r for r in again.removals if r.verb == "destroy"]
    # three times what the demand needs is on the way: the surplus goes
    surplus = snapshot(NOW, [*producing(4, NOW), *loading(3 * launched, NOW, created_ago_s=60)])
    assert launched <= on_the_way_kept(_sized(demand, surplus), 1200, MPC, 0.5) < 3 * launched
