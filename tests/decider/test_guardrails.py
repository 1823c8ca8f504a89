"""Guardrails: each rule on plain values, and hypothesis over sequences of actions and runs."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.decider.config import DeciderSettings
from services.decider.guardrails import (
    FleetLedger,
    GuardrailConfig,
    GuardrailRule,
    SentLaunch,
    check,
    ledger_from,
    unobserved_launches,
)
from shared.contract import (
    Action,
    DemandState,
    DestroyInstance,
    DrainInstance,
    FailureReason,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    ParkReason,
    RemovalReason,
    ResumeInstance,
    StopInstance,
)
from shared.settings import Settings
from tests.decider.factories import line, loading, producing, signal, snapshot

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
CONFIG = GuardrailConfig(
    budget_usd_per_h=20.0, max_instances=40, normal_max_price_usd_per_h=0.8, emergency_max_price_usd_per_h=1.2
)
_keys = iter(range(10**9))


def key() -> str:
    return f"test-key-{next(_keys)}"


def launch(count: int, priority: str = "normal", max_price: float | None = None) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW, source="decider", idempotency_key=key(), requested_by="policy", count=count,
        launch_priority=priority, reason="sustained_demand", max_price_usd_per_h=max_price,  # type: ignore[arg-type]
    )  # fmt: skip


def removal(kind: type[Action], instance_id: int, reason: RemovalReason = RemovalReason.IDLE) -> Action:
    return kind(  # type: ignore[call-arg]
        occurred_at=NOW, source="decider", idempotency_key=key(), requested_by="agent", instance_id=instance_id,
        reason=reason,
    )  # fmt: skip


def ledger(instances: list, *, pending: int = 0, rate: float = 0.0, state: DemandState = DemandState.SERVED,
           sent: list[SentLaunch] | None = None, stale: bool = False) -> FleetLedger:  # fmt: skip
    demand = signal(NOW, pending=pending, rate_per_h=rate, state=state)
    return ledger_from(snapshot(NOW, instances), demand, sent or [], NOW, stale=stale)


def test_stale_data_refuses_every_action() -> None:
    book = ledger(producing(2, NOW), stale=True)
    for action in (launch(1), removal(DrainInstance, 100)):
        verdict, after = check(action, book, NOW, CONFIG)
        assert verdict.verdict == "refused" and verdict.rule == GuardrailRule.STALE_DATA
        assert after == book


def test_budget_trims_a_launch_to_what_fits_and_refuses_when_nothing_does() -> None:
    fleet = producing(36, NOW, price_usd_per_h=0.5)  # $18/h
    verdict, after = check(launch(5), ledger(fleet), NOW, CONFIG)
    assert verdict.verdict == "allowed" and verdict.rule == GuardrailRule.BUDGET
    assert isinstance(verdict.action, LaunchInstances) and verdict.action.count == 2  # $2 left at up to $0.80 each
    assert after.committed_usd_per_h == 18 + 2 * 0.8
    verdict, _ = check(launch(1), after, NOW, CONFIG)
    assert verdict.verdict == "refused" and verdict.rule == GuardrailRule.BUDGET
    # an emergency launch is priced at the emergency cap
    verdict, _ = check(launch(2, "emergency"), ledger(fleet, state=DemandState.UNDER_PROVISIONED), NOW, CONFIG)
    assert isinstance(verdict.action, LaunchInstances) and verdict.action.count == 1


def test_max_instances_counts_pending_launches() -> None:
    fleet = producing(30, NOW, price_usd_per_h=0.1)
    sent = [SentLaunch("earlier-launch", NOW - timedelta(minutes=2), 8, 0.8)]
    book = ledger(fleet, sent=sent)
    assert book.instance_count == 38
    verdict, _ = check(launch(5), book, NOW, CONFIG)
    assert verdict.rule == GuardrailRule.MAX_INSTANCES and verdict.action.count == 2  # type: ignore[union-attr]


def test_max_launches_per_hour() -> None:
    sent = [SentLaunch(f"k{i}", NOW - timedelta(minutes=50 - i), 4, 0.1) for i in range(5)]  # 20 this hour
    fleet = producing(2, NOW) + loading(20, NOW, created_ago_s=120)
    verdict, _ = check(launch(1), ledger(fleet, sent=sent), NOW, CONFIG)
    assert verdict.verdict == "refused" and verdict.rule == GuardrailRule.MAX_LAUNCHES_PER_H
    later = NOW + timedelta(minutes=15)  # the first launches have left the window
    verdict, _ = check(launch(1), ledger(fleet, sent=sent), later, CONFIG)
    assert verdict.verdict == "allowed"


def test_a_price_above_the_cap_is_refused() -> None:
    verdict, _ = check(launch(1, max_price=1.0), ledger(producing(1, NOW)), NOW, CONFIG)
    assert verdict.rule == GuardrailRule.PRICE_CAP
    stalled = ledger(producing(1, NOW), pending=5, state=DemandState.WORKERS_STALLED)
    verdict, _ = check(launch(1, "emergency", max_price=1.0), stalled, NOW, CONFIG)
    assert verdict.verdict == "allowed" and verdict.action.launch_priority == "emergency"  # type: ignore[union-attr]


def test_the_last_producer_is_never_removed_while_tasks_are_queued_or_arriving() -> None:
    fleet = producing(2, NOW)
    book = ledger(fleet, pending=3)
    first, book = check(removal(DrainInstance, 100), book, NOW, CONFIG)
    assert first.verdict == "allowed"
    last, _ = check(removal(DrainInstance, 101), book, NOW, CONFIG)
    assert last.verdict == "refused" and last.rule == GuardrailRule.LAST_PRODUCERS
    arriving, _ = check(removal(DrainInstance, 101), replace(ledger(fleet, rate=60), removed=frozenset({100})), NOW,
                        CONFIG)  # fmt: skip
    assert arriving.rule == GuardrailRule.LAST_PRODUCERS
    idle_world = ledger(fleet)
    for iid in (100, 101):
        verdict, idle_world = check(removal(DrainInstance, iid), idle_world, NOW, CONFIG)
        assert verdict.verdict == "allowed"


def test_workers_stalled_is_never_a_reason_to_scale_down() -> None:
    fleet = [*producing(3, NOW), line(900, InstanceState.FAILED, NOW, failure_reason=FailureReason.DEAD),
             line(901, InstanceState.DRAINING, NOW)]  # fmt: skip
    book = ledger(fleet, pending=59, state=DemandState.WORKERS_STALLED)
    for action in (
        removal(DrainInstance, 100, RemovalReason.OVER_PROVISIONED),
        removal(StopInstance, 100, RemovalReason.DEAD),
        removal(DestroyInstance, 901, RemovalReason.IDLE),
    ):
        verdict, _ = check(action, book, NOW, CONFIG)
        assert verdict.rule == GuardrailRule.WORKERS_STALLED, verdict
    verdict, _ = check(removal(DestroyInstance, 900, RemovalReason.DEAD), book, NOW, CONFIG)
    assert verdict.verdict == "allowed"  # a dead machine is replaced and destroyed


def test_destroy_only_in_states_that_allow_it() -> None:
    fleet = [*producing(2, NOW), *loading(1, NOW), line(700, InstanceState.DRAINING, NOW)]
    book = ledger(fleet)
    verdict, _ = check(removal(DestroyInstance, 100, RemovalReason.OVER_PROVISIONED), book, NOW, CONFIG)
    assert verdict.rule == GuardrailRule.REMOVAL_STATE  # drain a producing machine first
    for iid in (500, 700):
        verdict, book = check(removal(DestroyInstance, iid), book, NOW, CONFIG)
        assert verdict.verdict == "allowed"
    verdict, _ = check(removal(DestroyInstance, 700), book, NOW, CONFIG)
    assert verdict.rule == GuardrailRule.ALREADY_REMOVED
    verdict, _ = check(removal(DestroyInstance, 12345), book, NOW, CONFIG)
    assert verdict.rule == GuardrailRule.UNKNOWN_INSTANCE


def test_bench_failed_is_refused_for_a_machine_whose_benchmark_only_went_unreported() -> None:
    unreported = line(100, InstanceState.PRODUCING, NOW).model_copy(update={"bench_verdict": "unknown"})
    failed = line(700, InstanceState.FAILED, NOW, failure_reason=FailureReason.BENCH_FAILED)
    book = ledger([unreported, *producing(2, NOW)[1:], failed])
    for kind in (DrainInstance, StopInstance):
        verdict, _ = check(removal(kind, 100, RemovalReason.BENCH_FAILED), book, NOW, CONFIG)
        assert verdict.verdict == "refused" and verdict.rule == GuardrailRule.BENCH_NOT_FAILED
    verdict, _ = check(removal(DestroyInstance, 700, RemovalReason.BENCH_FAILED), book, NOW, CONFIG)
    assert verdict.verdict == "allowed"


def test_a_destructive_action_without_a_reason_enum_is_refused() -> None:
    unchecked = DestroyInstance.model_construct(
        occurred_at=NOW, source="agent", idempotency_key=key(), requested_by="agent", instance_id=700, reason="tidy"
    )
    verdict, _ = check(unchecked, ledger([line(700, InstanceState.DRAINING, NOW)]), NOW, CONFIG)
    assert verdict.rule == GuardrailRule.REASON_REQUIRED and "tidy" in verdict.explanation


def test_launches_not_in_the_snapshot_yet_are_pending() -> None:
    sent = [
        SentLaunch("a", NOW - timedelta(minutes=5), 3, 0.8),
        SentLaunch("b", NOW - timedelta(minutes=1), 2, 0.8),
        SentLaunch("old", NOW - timedelta(minutes=30), 4, 0.8),  # long gone: refused or failed
    ]
    fleet = producing(2, NOW) + loading(2, NOW, created_ago_s=200)  # two of launch "a" are visible
    pending = unobserved_launches(sent, snapshot(NOW, fleet), NOW)
    assert [(p.idempotency_key, p.count) for p in pending] == [("a", 1), ("b", 2)]


def test_an_emergency_launch_on_demand_that_is_not_stalled_or_under_provisioned_is_downgraded_to_normal() -> None:
    """An operator message or a prompt cannot buy the emergency cap: the demand state decides it."""
    served = ledger(producing(2, NOW), pending=4, state=DemandState.SERVED)
    verdict, after = check(launch(2, "emergency", max_price=1.1), served, NOW, CONFIG)
    assert verdict.verdict == "allowed" and verdict.rule == GuardrailRule.EMERGENCY_UNJUSTIFIED
    granted = verdict.action
    assert isinstance(granted, LaunchInstances) and granted.launch_priority == "normal"
    assert granted.max_price_usd_per_h == CONFIG.normal_max_price_usd_per_h and granted.count == 2
    assert "demand is served" in verdict.explanation
    assert after.committed_usd_per_h == served.committed_usd_per_h + 2 * CONFIG.normal_max_price_usd_per_h
    for state in (DemandState.WORKERS_STALLED, DemandState.UNDER_PROVISIONED):
        kept, _ = check(launch(1, "emergency"), ledger(producing(2, NOW), pending=4, state=state), NOW, CONFIG)
        assert kept.action.launch_priority == "emergency" and kept.rule is None  # type: ignore[union-attr]


def test_producers_the_backlog_needs_over_the_drain_horizon_are_not_removed_as_surplus() -> None:
    """600 tasks at 120/h are 5 worker-hours: over a 1 h drain horizon they need 5 producers, not 1."""
    config = replace(CONFIG, backlog_drain_horizon_h=1.0)
    book = ledger(producing(6, NOW), pending=600)
    first, book = check(removal(DrainInstance, 100, RemovalReason.IDLE), book, NOW, config)
    assert first.verdict == "allowed"
    for verb in (DrainInstance, StopInstance, DestroyInstance):
        refused, _ = check(removal(verb, 101, RemovalReason.OVER_PROVISIONED), book, NOW, config)
        assert refused.verdict == "refused" and refused.rule == GuardrailRule.BACKLOG_FLOOR
        assert "needs 5" in refused.explanation
    # a budget cut is no claim about demand: over the budget, the hard budget wins over the backlog floor, for as
    # long as the fleet is over it: $20.40/h of a $20/h budget frees one machine's $3.40, not five
    over_budget = ledger(producing(6, NOW, price_usd_per_h=3.4), pending=2000)  # the floor: 17 producers
    budget, over_budget = check(removal(DrainInstance, 101, RemovalReason.BUDGET), over_budget, NOW, config)
    assert budget.verdict == "allowed"
    again, _ = check(removal(DrainInstance, 102, RemovalReason.BUDGET), over_budget, NOW, config)
    assert again.verdict == "refused" and again.rule == GuardrailRule.BACKLOG_FLOOR


def test_a_reason_the_facts_do_not_back_does_not_lift_the_backlog_floor() -> None:
    """Six producers with 2,000 tasks queued (17 worker-h) and $3/h of a $20/h budget: an agent told by a task
    type to drain `for budget` drained five of six, and `dead` or `operator_request` did the same. Within the
    budget, and for a machine fleet says produces, each is held to the floor; the operator's own directive, a
    failed benchmark and a real budget breach are not."""
    book = ledger(producing(6, NOW, price_usd_per_h=0.5), pending=2000)
    for reason in (RemovalReason.BUDGET, RemovalReason.DEAD, RemovalReason.FAILED, RemovalReason.OPERATOR_REQUEST,
                   RemovalReason.STUCK_LOADING, RemovalReason.OUTBID):  # fmt: skip
        refused, _ = check(removal(DrainInstance, 100, reason), book, NOW, CONFIG)
        assert refused.verdict == "refused" and refused.rule == GuardrailRule.BACKLOG_FLOOR, reason
    directed = removal(DrainInstance, 100, RemovalReason.OPERATOR_REQUEST).model_copy(
        update={"requested_by": "operator"}
    )
    assert check(directed, book, NOW, CONFIG)[0].verdict == "allowed"
    failed = line(100, InstanceState.PRODUCING, NOW).model_copy(update={"bench_verdict": "fail"})
    failed_bench = ledger([*producing(5, NOW, first_id=101), failed], pending=2000)
    assert check(removal(DrainInstance, 100, RemovalReason.BENCH_FAILED), failed_bench, NOW, CONFIG)[0].verdict == (
        "allowed"
    )


def test_the_decider_settings_give_the_guardrails_the_policys_drain_horizon() -> None:
    config = DeciderSettings().guardrail_config(Settings())
    assert config.backlog_drain_horizon_h == DeciderSettings().policy_config(Settings()).backlog_drain_target_s / 3600


# --- properties ----------------------------------------------------------------------------------------------

prices = st.floats(min_value=0.05, max_value=1.2, allow_nan=False)
states = st.sampled_from(list(InstanceState))
reasons = st.sampled_from(list(RemovalReason))
action_specs = st.one_of(
    st.tuples(st.just("launch"), st.integers(1, 30), st.sampled_from(["normal", "emergency"])),
    st.tuples(st.sampled_from(["drain", "stop", "destroy"]), st.integers(0, 30), reasons),
)
KINDS: dict[str, type[Action]] = {"drain": DrainInstance, "stop": StopInstance, "destroy": DestroyInstance}


def build_action(spec: tuple, ids: list[int]) -> Action:
    if spec[0] == "launch":
        return launch(spec[1], spec[2])
    return removal(KINDS[spec[0]], ids[spec[1] % len(ids)] if ids else spec[1], spec[2])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fleet=st.lists(st.tuples(states, prices), max_size=30),
    pending=st.integers(0, 100),
    stalled=st.booleans(),
    specs=st.lists(action_specs, max_size=25),
)
def test_no_sequence_of_actions_exceeds_the_budget_or_removes_the_last_producers(
    fleet: list[tuple[InstanceState, float]], pending: int, stalled: bool, specs: list[tuple]
) -> None:
    instances = [line(i, state, NOW, price_usd_per_h=price) for i, (state, price) in enumerate(fleet)
                 if state is not InstanceState.GONE]  # fmt: skip
    book = ledger(instances, pending=pending, state=DemandState.WORKERS_STALLED if stalled else DemandState.SERVED)
    producers_before = book.producing
    start_committed = book.committed_usd_per_h
    for spec in specs:
        verdict, book = check(build_action(spec, [i.instance_id for i in instances]), book, NOW, CONFIG)
        if verdict.verdict == "allowed" and isinstance(verdict.action, LaunchInstances):
            assert book.committed_usd_per_h <= CONFIG.budget_usd_per_h + 1e-9
        assert book.committed_usd_per_h <= max(CONFIG.budget_usd_per_h, start_committed) + 1e-9
        assert book.instance_count <= max(CONFIG.max_instances, len(instances))
        if pending > 0:
            assert book.producing >= min(producers_before, CONFIG.min_producers_while_queued)
        if stalled:
            assert book.producing == producers_before


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=st.sampled_from(list(DemandState)),
    count=st.integers(1, 30),
    max_price=st.one_of(st.none(), st.floats(min_value=0.1, max_value=1.2, allow_nan=False)),
    pending=st.integers(0, 200),
)
def test_an_allowed_launch_pays_the_emergency_cap_only_on_stalled_or_under_provisioned_demand(
    state: DemandState, count: int, max_price: float | None, pending: int
) -> None:
    book = ledger(producing(2, NOW), pending=pending, state=state)
    verdict, after = check(launch(count, "emergency", max_price=max_price), book, NOW, CONFIG)
    if verdict.verdict != "allowed":
        return
    granted = verdict.action
    assert isinstance(granted, LaunchInstances)
    justified = state in (DemandState.WORKERS_STALLED, DemandState.UNDER_PROVISIONED)
    assert (granted.launch_priority == "emergency") == justified
    cap = CONFIG.emergency_max_price_usd_per_h if justified else CONFIG.normal_max_price_usd_per_h
    assert after.launches[-1].worst_price_usd_per_h <= cap + 1e-9


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    producers=st.integers(0, 12),
    pending=st.integers(0, 2000),
    horizon_h=st.floats(min_value=0.25, max_value=4.0, allow_nan=False),
    specs=st.lists(
        st.tuples(
            st.sampled_from(["drain", "stop", "destroy"]),
            st.integers(0, 30),
            st.sampled_from([RemovalReason.IDLE, RemovalReason.OVER_PROVISIONED, RemovalReason.PARK]),
        ),
        max_size=20,
    ),
)
def test_no_sequence_of_scale_downs_leaves_fewer_producers_than_the_backlog_needs(
    producers: int, pending: int, horizon_h: float, specs: list[tuple]
) -> None:
    config = replace(CONFIG, backlog_drain_horizon_h=horizon_h)
    fleet = producing(producers, NOW)
    book = ledger(fleet, pending=pending)
    needed = math.ceil(pending / 120.0 / horizon_h - 1e-9)  # the factories' signal: 120 tasks/h per worker
    for spec in specs:
        _, book = check(build_action(spec, [i.instance_id for i in fleet]), book, NOW, config)
        assert book.producing >= min(producers, needed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(
        st.tuples(st.lists(action_specs, max_size=8), st.integers(0, 40), st.lists(prices, min_size=30, max_size=30)),
        min_size=1,
        max_size=12,
    )
)
def test_across_runs_the_world_never_exceeds_the_budget_nor_loses_its_last_producer_with_tasks_queued(
    runs: list[tuple[list[tuple], int, list[float]]],
) -> None:
    """A small world: allowed launches appear a run later at a price within their cap; removals take effect."""
    now = NOW
    world = {i.instance_id: i for i in producing(3, now, price_usd_per_h=0.5)}
    sent: list[SentLaunch] = []
    arriving_next: list[tuple[int, float]] = []
    next_id = 1000
    for specs, pending, offer_prices in runs:
        for count, worst in arriving_next:  # the provisioner created them (created_at: now)
            for j in range(count):
                price = min(worst, offer_prices[j % len(offer_prices)])
                world[next_id] = line(next_id, InstanceState.LOADING, now, created_ago_s=0, state_for_s=0,
                                      price_usd_per_h=price, last_task_ago_s=None)  # fmt: skip
                next_id += 1
        arriving_next = []
        fleet = snapshot(now, list(world.values()))
        producers_before = fleet.producing_instances
        assert fleet.spend_usd_per_h <= CONFIG.budget_usd_per_h + 1e-9
        book = ledger_from(fleet, signal(now, pending=pending), sent, now, stale=False)
        ids = sorted(world)
        for spec in specs:
            verdict, book = check(build_action(spec, ids), book, now, CONFIG)
            if verdict.verdict != "allowed":
                continue
            action = verdict.action
            if isinstance(action, LaunchInstances):
                worst = book.launches[-1].worst_price_usd_per_h
                sent.append(book.launches[-1])
                arriving_next.append((action.count, worst))
            elif isinstance(action, DrainInstance):
                world[action.instance_id] = line(action.instance_id, InstanceState.DRAINING, now,
                                                 price_usd_per_h=world[action.instance_id].price_usd_per_h)  # fmt: skip
            else:
                world.pop(action.instance_id)
        producers = sum(1 for i in world.values() if i.state is InstanceState.PRODUCING)
        if pending > 0:
            assert producers >= min(1, producers_before)
        now += timedelta(minutes=1)


def test_by_default_a_cold_start_reaches_the_whole_fleet_within_one_hour_of_launches() -> None:
    defaults = DeciderSettings().guardrail_config(Settings())
    assert defaults.max_launches_per_h == defaults.max_instances
    cheap = replace(defaults, budget_usd_per_h=defaults.max_instances * defaults.normal_max_price_usd_per_h)
    book = ledger([], pending=500, rate=4000)
    granted = 0
    for minute in range(0, 60, 5):  # a launch every decider run of a surge building for an hour
        verdict, book = check(launch(4), book, NOW + timedelta(minutes=minute), cheap)
        assert verdict.rule != GuardrailRule.MAX_LAUNCHES_PER_H, verdict.explanation
        granted += verdict.action.count if verdict.verdict == "allowed" else 0  # type: ignore[union-attr]
    assert granted == min(48, defaults.max_instances)


def test_a_launch_the_budget_refused_is_granted_by_a_later_run_once_it_fits_and_says_which_limit_bound() -> None:
    fleet = producing(38, NOW, price_usd_per_h=0.5)  # $19/h of $20/h
    verdict, _ = check(launch(2), ledger(fleet), NOW, CONFIG)
    assert verdict.verdict == "allowed" and verdict.rule == GuardrailRule.BUDGET
    assert verdict.action.count == 1 and "trimmed by budget_usd_per_h" in verdict.explanation  # type: ignore[union-attr]
    # the policy is stateless: the next run asks again for what it still needs, and two machines later it fits
    verdict, _ = check(launch(1), ledger(fleet[:36]), NOW + timedelta(minutes=5), CONFIG)
    assert verdict.verdict == "allowed" and verdict.rule is None


def test_the_producer_count_after_removals_is_the_count_of_what_is_left() -> None:
    """The ledger counts the snapshot's producers once and takes off the removed ones: the same figure as counting
    every state anew, whatever was removed (producers, a loading machine, an id the snapshot does not show)."""
    book = ledger([*producing(4, NOW), *loading(2, NOW)], pending=3)
    assert book.producing == 4
    for removed in ({100}, {100, 103}, {100, 500}, {500, 501}, {100, 999}):
        after = replace(book, removed=frozenset(removed))
        recounted = replace(after, producing_in_states=None)
        expected = sum(1 for iid in (100, 101, 102, 103) if iid not in removed)
        assert after.producing == recounted.producing == expected


def parked(instance_id: int, reason: ParkReason = ParkReason.STOPPED, price: float = 0.5) -> InstanceLine:
    return line(instance_id, InstanceState.PARKED, NOW, price_usd_per_h=price, last_task_ago_s=None).model_copy(
        update={"park_reason": reason, "storage_usd_per_h": 0.02}
    )


def fleet_ledger(instances: list[InstanceLine]) -> FleetLedger:
    """As fleet publishes it: spend is what each line commits (a parked one its storage)."""
    view = snapshot(NOW, instances)
    view = view.model_copy(update={"spend_usd_per_h": sum(i.committed_usd_per_h for i in instances)})
    return ledger_from(view, signal(NOW, pending=10, rate_per_h=100.0), [], NOW, stale=False)


def resume_action(instance_id: int) -> ResumeInstance:
    return ResumeInstance(
        occurred_at=NOW, source="decider", idempotency_key=key(), requested_by="policy", instance_id=instance_id,
        reason=LaunchReason.SUSTAINED_DEMAND,
    )  # fmt: skip


def test_parked_storage_counts_in_the_budget_and_a_resume_counts_its_full_price() -> None:
    # $19.00/h producing + two parked at $0.02/h storage: $19.04 of $20
    book = fleet_ledger([*producing(38, NOW, price_usd_per_h=0.5), parked(900), parked(901)])
    assert book.committed_usd_per_h == pytest.approx(19.04)
    assert book.instance_count == 40  # parked machines still count as instances
    verdict, after = check(resume_action(900), book, NOW, CONFIG)
    assert verdict.verdict == "allowed", verdict.explanation
    assert after.committed_usd_per_h == pytest.approx(19.52)  # less its storage, plus its $0.50
    assert "resume #900" in verdict.explanation and "$0.50/h" in verdict.explanation
    verdict, _ = check(resume_action(901), after, NOW, CONFIG)  # $19.52 - $0.02 + $0.50: $20.00 fits exactly
    assert verdict.verdict == "allowed"
    pricier = fleet_ledger([*producing(38, NOW, price_usd_per_h=0.5), parked(900, price=1.1)])
    verdict, same = check(resume_action(900), pricier, NOW, CONFIG)
    assert (verdict.verdict, verdict.rule) == ("refused", GuardrailRule.BUDGET)
    assert same == pricier
    # a launch sees the same room: the parked machines' storage is spent
    verdict, _ = check(launch(2), book, NOW, CONFIG)
    assert verdict.verdict == "refused" and verdict.rule == GuardrailRule.MAX_INSTANCES


def test_only_a_machine_we_parked_is_resumed_and_only_once_per_run() -> None:
    book = fleet_ledger([*producing(2, NOW), parked(900), parked(901, ParkReason.OUTBID)])
    verdict, _ = check(resume_action(901), book, NOW, CONFIG)
    assert (verdict.verdict, verdict.rule) == ("refused", GuardrailRule.NOT_PARKED)
    assert "outbid" in verdict.explanation
    verdict, _ = check(resume_action(100), book, NOW, CONFIG)  # producing
    assert (verdict.verdict, verdict.rule) == ("refused", GuardrailRule.NOT_PARKED)
    verdict, after = check(resume_action(900), book, NOW, CONFIG)
    assert verdict.verdict == "allowed"
    verdict, _ = check(resume_action(900), after, NOW, CONFIG)
    assert (verdict.verdict, verdict.rule) == ("refused", GuardrailRule.ALREADY_REMOVED)


def test_a_park_is_named_in_the_audit_and_a_parked_machine_may_be_destroyed() -> None:
    book = fleet_ledger([*producing(2, NOW), line(300, InstanceState.DRAINING, NOW), parked(900)])
    verdict, _ = check(removal(StopInstance, 300, RemovalReason.PARK), book, NOW, CONFIG)
    assert verdict.verdict == "allowed"
    assert verdict.explanation.startswith("park #300 (draining)") and "disk kept" in verdict.explanation
    verdict, _ = check(removal(DestroyInstance, 900, RemovalReason.IDLE), book, NOW, CONFIG)
    assert verdict.verdict == "allowed"  # demand did not come back: its storage is freed too
    # a park is a scale-down: never while the workers are stalled
    stalled = replace(book, workers_stalled=True)
    verdict, _ = check(removal(StopInstance, 300, RemovalReason.PARK), stalled, NOW, CONFIG)
    assert verdict.rule == GuardrailRule.WORKERS_STALLED
