"""Operator directives enforced in the decider's step: each kind's effect on a plan (launches trimmed or refused,
machines given back, levers set), expiry and revocation, the effect texts, the refusals of a new directive, and
the invariant that a directive only ever tightens the configured limits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from services.decider.directives import (
    BIDS_ON_SHARE,
    active_directives,
    check_new,
    effect,
    levers,
    removals_for,
    tightened,
)
from services.decider.guardrails import GuardrailConfig, GuardrailRule
from services.decider.policy import PolicyConfig, PredictivePolicy
from services.decider.step import RunPlan, plan_run
from shared.contract import (
    Action,
    DemandSignal,
    DemandState,
    DestroyInstance,
    DrainInstance,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    ParkReason,
    RemovalReason,
    ResumeInstance,
    StopInstance,
)
from shared.contract.directives import (
    CapBudget,
    CapInstances,
    Directive,
    DirectiveBase,
    DrainBy,
    ExcludeGpuModel,
    ExcludeHost,
    SetLever,
)
from tests.decider.factories import HOUR_S, line, loading, producing, signal, snapshot, window

S = InstanceState
D = TypeVar("D", bound=DirectiveBase)
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday
POLICY = PredictivePolicy(PolicyConfig(mpc=False))  # the rules' counts: what each directive trims is exact
# roomy: without directives nothing here is trimmed by the configuration
CONFIGURED = GuardrailConfig(budget_usd_per_h=100.0, max_instances=40, normal_max_price_usd_per_h=0.8,
                             emergency_max_price_usd_per_h=1.2)  # fmt: skip


def directive(kind: type[D], number: int, *, lasts_h: float = 6.0, **fields: Any) -> D:
    set_at = NOW - timedelta(minutes=10)
    return kind(directive_id=number, set_at=set_at, set_by="ops", via="cli",
                expires_at=NOW + timedelta(hours=lasts_h), **fields)  # fmt: skip


def short_fleet() -> tuple[DemandSignal, FleetSnapshot]:
    """600 tasks/h sustained against 2 producers: the policy launches 8."""
    demand = signal(NOW, state=DemandState.UNDER_PROVISIONED, pending=60, rate_per_h=600, producing_workers=2,
                    above_capacity_for_s=1800)  # fmt: skip
    return demand, snapshot(NOW, producing(2, NOW))


def plan(demand: DemandSignal, fleet: FleetSnapshot, directives: Sequence[Directive], **kwargs: Any) -> RunPlan:
    return plan_run(demand, fleet, [], NOW, POLICY, CONFIGURED, run_id="run-0001", directives=directives, **kwargs)


def launched(commands: Sequence[Action]) -> int:
    return sum(c.count for c in commands if isinstance(c, LaunchInstances))


def given_back(result: RunPlan, directive_id: int) -> list[tuple[str, int]]:
    """The machines the directive gives back in this plan, as allowed."""
    return [
        (v.action.verb, v.action.instance_id)
        for v in result.verdicts
        if v.directive_id == directive_id
        and v.verdict == "allowed"
        and isinstance(v.action, DrainInstance | DestroyInstance)
    ]


def judged(result: RunPlan) -> list[tuple[str, str | None, str]]:
    return [(v.verdict, v.rule, v.explanation) for v in result.verdicts]


# ---- which directives are in force ---------------------------------------------------------------------------


def test_only_directives_set_not_expired_and_not_revoked_are_active() -> None:
    cap = directive(CapInstances, 1, max_instances=3)
    expired = directive(CapInstances, 2, max_instances=1, lasts_h=-0.01)
    revoked = directive(CapInstances, 3, max_instances=1).model_copy(update={"revoked_at": NOW, "revoked_by": "ops"})
    later = CapInstances(directive_id=4, set_at=NOW + timedelta(hours=1), set_by="ops", via="cli",
                         expires_at=NOW + timedelta(hours=2), max_instances=1)  # fmt: skip
    assert active_directives([later, revoked, expired, cap], NOW) == (cap,)


def test_an_expired_or_revoked_directive_changes_nothing_in_the_plan() -> None:
    demand, fleet = short_fleet()
    alone = plan(demand, fleet, [])
    expired = directive(CapInstances, 1, max_instances=2, lasts_h=-0.01)
    revoked = directive(CapInstances, 2, max_instances=2).model_copy(update={"revoked_at": NOW, "revoked_by": "ops"})
    ended = plan(demand, fleet, [expired, revoked])
    assert ended.explanation == alone.explanation and judged(ended) == judged(alone)
    assert ended.directives == () and alone.directives == ()
    in_force = plan(demand, fleet, [directive(CapInstances, 3, max_instances=2)])
    assert in_force.directives == (3,) and launched(in_force.commands) == 0


# ---- the limits ----------------------------------------------------------------------------------------------


def test_caps_tighten_the_limits_and_a_cap_above_the_configured_one_changes_nothing() -> None:
    limits = tightened(
        CONFIGURED,
        [directive(CapInstances, 1, max_instances=60), directive(CapInstances, 2, max_instances=10),
         directive(CapBudget, 3, max_usd_per_h=7.5), directive(CapBudget, 4, max_usd_per_h=500)],
        NOW,
    )  # fmt: skip
    assert (limits.max_instances, limits.budget_usd_per_h) == (10, 7.5)
    assert limits.directive_ids == {"max_instances": 2, "budget_usd_per_h": 3}
    loose = tightened(CONFIGURED, [directive(CapInstances, 1, max_instances=60)], NOW)
    assert loose == CONFIGURED


def test_a_drain_refuses_launches_that_could_not_produce_in_time_and_closes_the_fleet_near_its_moment() -> None:
    drain = directive(DrainBy, 5, drain_by=NOW + timedelta(hours=3))
    limits = tightened(CONFIGURED, [drain], NOW, startup_s=1.5 * HOUR_S)
    assert limits.no_launch_after == NOW + timedelta(hours=1.5) and limits.max_instances == 40
    near = tightened(CONFIGURED, [drain], NOW + timedelta(hours=2, minutes=45))
    assert near.max_instances == 0 and near.directive_ids["max_instances"] == 5


def test_exclusions_are_added_to_the_guardrails() -> None:
    limits = tightened(
        CONFIGURED, [directive(ExcludeGpuModel, 1, gpu_model="RTX 3090"), directive(ExcludeHost, 2, host_id=77)], NOW
    )
    assert limits.excluded_gpu_models == {"RTX 3090"} and limits.excluded_host_ids == {77}
    assert limits.excludes_gpu_model("rtx_3090")


# ---- launches ------------------------------------------------------------------------------------------------


def test_an_instance_cap_trims_the_launch_and_the_explanation_names_it() -> None:
    demand, fleet = short_fleet()
    result = plan(demand, fleet, [directive(CapInstances, 3, max_instances=4)])
    assert launched(result.commands) == 2
    [verdict] = result.verdicts
    assert (verdict.rule, verdict.directive_id) == (GuardrailRule.MAX_INSTANCES.value, 3)
    assert "directive #3" in verdict.explanation
    assert result.explanation.endswith("; directive #3 cap 4: launch 8 -> 2 (max_instances)")
    assert "guardrails:" not in result.explanation  # told once, under the directive


def test_a_budget_cap_trims_the_launch() -> None:
    demand, fleet = short_fleet()
    result = plan(demand, fleet, [directive(CapBudget, 4, max_usd_per_h=2.0)])
    # $1.00/h committed by the two producers, $0.80/h at most per new machine: one fits under $2.00/h
    assert launched(result.commands) == 1
    assert result.explanation.endswith("; directive #4 $2.00/h: launch 8 -> 1 (budget_usd_per_h)")


def test_a_launch_carries_the_exclusions_and_one_naming_only_excluded_models_is_refused() -> None:
    demand, fleet = short_fleet()
    exclusions: list[Directive] = [
        directive(ExcludeGpuModel, 1, gpu_model="RTX 3090"),
        directive(ExcludeHost, 2, host_id=77),
    ]
    [command] = plan(demand, fleet, exclusions).commands
    assert isinstance(command, LaunchInstances) and command.count == 8
    assert (command.exclude_gpu_models, command.exclude_host_ids) == (["RTX 3090"], [77])
    picky = PredictivePolicy(PolicyConfig(preferred_gpu_models=("RTX 3090",), mpc=False))
    refused = plan_run(demand, fleet, [], NOW, picky, CONFIGURED, run_id="run-0002", directives=exclusions)
    [verdict] = refused.verdicts
    assert (verdict.verdict, verdict.rule, verdict.directive_id) == ("refused", "directive", 1)
    assert refused.explanation.endswith("; directive #1 no RTX 3090: launch 8 refused")
    # a preference list keeps its allowed models: the excluded one is left out of the provisioner's wishes
    mixed = PredictivePolicy(PolicyConfig(preferred_gpu_models=("RTX 3090", "RTX 4090"), mpc=False))
    [kept] = plan_run(demand, fleet, [], NOW, mixed, CONFIGURED, run_id="run-0003", directives=exclusions).commands
    assert isinstance(kept, LaunchInstances) and kept.gpu_models == ["RTX 4090"]


def test_no_launch_once_it_could_not_produce_before_the_drain() -> None:
    demand, fleet = short_fleet()
    in_time = plan(demand, fleet, [directive(DrainBy, 6, drain_by=NOW + timedelta(hours=3))])
    assert launched(in_time.commands) == 8
    too_late = plan(demand, fleet, [directive(DrainBy, 6, drain_by=NOW + timedelta(hours=1))])
    assert launched(too_late.commands) == 0
    assert too_late.verdicts[0].rule == "directive" and "could not produce before" in too_late.verdicts[0].explanation


def test_a_resume_onto_an_excluded_gpu_model_or_host_is_refused() -> None:
    demand, fleet = short_fleet()
    parked = line(700, S.PARKED, NOW, gpu_model="RTX 3090").model_copy(
        update={"park_reason": ParkReason.STOPPED, "host_id": 77}
    )
    fleet = snapshot(NOW, [*fleet.instances, parked])
    parking = PredictivePolicy(PolicyConfig(park=True))
    for exclusion in (directive(ExcludeGpuModel, 1, gpu_model="RTX 3090"), directive(ExcludeHost, 2, host_id=77)):
        result = plan_run(demand, fleet, [], NOW, parking, CONFIGURED, run_id="run-0001", directives=[exclusion])
        [resume] = [v for v in result.verdicts if isinstance(v.action, ResumeInstance)]
        assert (resume.verdict, resume.rule, resume.directive_id) == ("refused", "directive", exclusion.directive_id)
    allowed = plan_run(demand, fleet, [], NOW, parking, CONFIGURED, run_id="run-0001")
    assert [v.verdict for v in allowed.verdicts if isinstance(v.action, ResumeInstance)] == ["allowed"]


# ---- machines given back -------------------------------------------------------------------------------------


# demand the eight machines of `mixed_fleet` are all needed for: the policy itself removes none
BUSY = signal(NOW, rate_per_h=1200, pending=40, producing_workers=6, above_capacity_for_s=1800)


def mixed_fleet() -> FleetSnapshot:
    """Eight machines: two still loading, one producer idle for an hour, a slow one, four busy ones."""
    idle = line(110, S.PRODUCING, NOW, last_task_ago_s=HOUR_S)
    slow = line(111, S.PRODUCING, NOW, throughput_per_h=60.0)
    dear = line(112, S.PRODUCING, NOW, price_usd_per_h=0.9)
    return snapshot(NOW, [*producing(3, NOW), idle, slow, dear, *loading(2, NOW)])


def test_machines_above_an_instance_cap_go_not_yet_producing_first_then_idle_then_slowest() -> None:
    result = plan(BUSY, mixed_fleet(), [directive(CapInstances, 7, max_instances=4)])
    # loading machines have no task to finish: destroyed; producers drain after their tasks
    assert given_back(result, 7) == [("destroy", 500), ("destroy", 501), ("drain", 110), ("drain", 111)]
    removals = [v.action for v in result.verdicts if v.directive_id == 7 and not isinstance(v.action, LaunchInstances)]
    assert {a.requested_by for a in removals} == {"operator"}
    assert result.explanation.endswith(
        "; directive #7 cap 4: launch 8 refused (max_instances), destroy #500 #501, drain #110 #111"
    )


def test_a_budget_cap_gives_back_the_dearest_per_task() -> None:
    # $4.40/h committed; under $3.00/h: the two loading ($1.00), then the idle one ($0.50)
    result = plan(BUSY, mixed_fleet(), [directive(CapBudget, 8, max_usd_per_h=3.0)])
    assert given_back(result, 8) == [("destroy", 500), ("destroy", 501), ("drain", 110)]
    # under $2.00/h, busy producers too, dearest per task first: #111 at $0.50/h for 60 tasks/h ($0.0083/task)
    # before #112 at $0.90/h for 120 ($0.0075/task), dearer per hour but cheaper per task; $1.50/h stay
    tighter = plan(BUSY, mixed_fleet(), [directive(CapBudget, 8, max_usd_per_h=2.0)])
    assert given_back(tighter, 8) == [
        ("destroy", 500), ("destroy", 501), ("drain", 110), ("drain", 111), ("drain", 112)
    ]  # fmt: skip
    assert {c.reason for c in tighter.commands if isinstance(c, DrainInstance)} == {RemovalReason.BUDGET}


def test_no_machine_is_given_back_twice() -> None:
    draining = line(120, S.DRAINING, NOW, state_for_s=60)
    fleet = snapshot(NOW, [*mixed_fleet().instances, draining])
    cap = directive(CapInstances, 7, max_instances=4)
    # the draining machine is on its way out already: it neither counts nor is drained again
    first = plan(BUSY, fleet, [cap])
    assert given_back(first, 7) == [("destroy", 500), ("destroy", 501), ("drain", 110), ("drain", 111)]
    # a second plan within the run starts from what the first did: nothing more to give back
    again = plan(BUSY, fleet, [cap], ledger=first.ledger)
    assert given_back(again, 7) == []


def test_removals_left_out_for_machines_already_leaving() -> None:
    cap = directive(CapInstances, 7, max_instances=4)
    chosen = removals_for(mixed_fleet(), [cap], NOW, leaving=frozenset({500, 501}))
    assert [r.plan.instance_id for r in chosen] == [110, 111]
    assert removals_for(mixed_fleet(), [], NOW) == [] and removals_for(None, [cap], NOW) == []


def test_from_its_drain_start_every_machine_is_given_back() -> None:
    parked = line(700, S.PARKED, NOW).model_copy(update={"park_reason": ParkReason.STOPPED})
    fleet = snapshot(NOW, [*mixed_fleet().instances, parked])
    drain = directive(DrainBy, 9, drain_by=NOW + timedelta(minutes=15))
    result = plan(BUSY, fleet, [drain])
    backs = {iid: verb for verb, iid in given_back(result, 9)}
    # what cannot hold a task is destroyed, producers drain; the last producer stays while tasks are queued:
    # the guardrails' floor is the configuration's, which a directive cannot lower
    assert backs == {**dict.fromkeys([100, 101, 102, 110, 111], "drain"), 500: "destroy", 501: "destroy",
                     700: "destroy"}  # fmt: skip
    kept = [(v.action.instance_id, v.rule) for v in result.verdicts
            if v.directive_id == 9 and v.verdict == "refused" and isinstance(v.action, DrainInstance)]  # fmt: skip
    assert kept == [(112, GuardrailRule.LAST_PRODUCERS.value)]
    early = plan(BUSY, fleet, [directive(DrainBy, 9, drain_by=NOW + timedelta(hours=2))])
    assert given_back(early, 9) == []


# ---- levers --------------------------------------------------------------------------------------------------


def test_levers_switch_park_and_bids_and_the_newest_directive_wins() -> None:
    on = directive(SetLever, 1, lever="park", state="on")
    off_later = directive(SetLever, 2, lever="park", state="off").model_copy(update={"set_at": NOW})
    assert levers(PolicyConfig(), [on]).park is True
    assert levers(PolicyConfig(park=True), [on, off_later]).park is False
    bids = directive(SetLever, 3, lever="bids", state="on")
    assert levers(PolicyConfig(), [bids]).bid_share == BIDS_ON_SHARE
    assert levers(PolicyConfig(bid_share=0.3), [bids]).bid_share == 0.3
    assert levers(PolicyConfig(bid_share=0.3), [directive(SetLever, 4, lever="bids", state="off")]).bid_share == 0


def test_the_plan_follows_the_levers_and_the_configured_policy_is_left_as_it_was() -> None:
    busy = [line(100 + i, S.PRODUCING, NOW, last_task_ago_s=10 + 10 * i) for i in range(10)]
    quiet = signal(NOW, rate_per_h=240, pending=0, windows=[window(300, 240), window(7200, 240)])
    parking = PredictivePolicy(PolicyConfig(park=True))
    parked = plan_run(quiet, snapshot(NOW, busy), [], NOW, parking, CONFIGURED, run_id="run-0001")
    assert {a.reason for a in parked.actions} == {RemovalReason.PARK}
    park_off = [directive(SetLever, 1, lever="park", state="off")]
    drained = plan_run(quiet, snapshot(NOW, busy), [], NOW, parking, CONFIGURED, run_id="run-0002", directives=park_off)
    assert drained.actions and RemovalReason.PARK not in {a.reason for a in drained.actions}
    assert parking.config.park is True
    demand = signal(NOW, rate_per_h=1920, producing_workers=4, above_capacity_for_s=HOUR_S,
                    windows=[window(300, 1920), window(3600, 1920)])  # fmt: skip
    bids_on = [directive(SetLever, 2, lever="bids", state="on")]
    bidding = plan(demand, snapshot(NOW, producing(4, NOW)), bids_on)
    assert sum(c.interruptible for c in bidding.commands if isinstance(c, LaunchInstances)) > 0
    assert not any(isinstance(c, StopInstance) for c in bidding.commands)


# ---- a new directive, and what it does ----------------------------------------------------------------------


def test_a_directive_that_would_loosen_or_change_nothing_is_refused() -> None:
    assert check_new(directive(CapInstances, 1, max_instances=60), CONFIGURED) == (
        "cap 60 is above the configured max_instances 40: a directive can only tighten the limits"
    )
    assert check_new(directive(CapInstances, 1, max_instances=40), CONFIGURED) == (
        "cap 40 is equal to the configured max_instances 40: a directive can only tighten the limits"
    )
    assert check_new(directive(CapBudget, 1, max_usd_per_h=250), CONFIGURED) == (
        "$250.00/h is above the configured budget $100.00/h: a directive can only tighten the limits"
    )
    accepted: list[Directive] = [
        directive(CapInstances, 1, max_instances=10),
        directive(CapBudget, 2, max_usd_per_h=5),
        directive(ExcludeGpuModel, 3, gpu_model="RTX 3090"),
        directive(ExcludeHost, 4, host_id=1),
        directive(DrainBy, 5, drain_by=NOW + timedelta(hours=1)),
        directive(SetLever, 6, lever="bids", state="on"),
        directive(SetLever, 7, lever="park", state="off"),
    ]
    assert [check_new(d, CONFIGURED) for d in accepted] == [None] * len(accepted)
    # a drain due the moment the directive ends would lift its cap and launch stop right after the drain
    assert check_new(directive(DrainBy, 8, drain_by=NOW + timedelta(hours=6)), CONFIGURED) == (
        "the directive ends at Mon 18:00 UTC, the moment the drain is due: give an expiry after the drain, for as"
        " long as the fleet must stay given back"
    )


def test_an_exclusion_of_a_model_nobody_knows_warns_and_suggests_the_near_one() -> None:
    fleet = snapshot(NOW, [line(140, S.PRODUCING, NOW, gpu_model="RTX 4080")])
    typo, unlisted, rented = (
        effect(directive(ExcludeGpuModel, n, gpu_model=model), fleet, CONFIGURED, NOW)
        for n, model in [(1, "RTX 4009"), (2, "Quadro K4000"), (3, "rtx 4080")]
    )
    assert typo.endswith(
        "(warning: 'RTX 4009' is no model the catalogue or the fleet knows, excluded as written; did you mean "
        "RTX 4090?)"
    )
    assert "warning" in unlisted and "did you mean" not in unlisted
    assert "warning" not in rented  # not in the catalogue, but the fleet rents it


def test_the_effect_of_each_kind_in_numbers() -> None:
    parked = line(131, S.PARKED, NOW, gpu_model="RTX 3090").model_copy(update={"park_reason": ParkReason.STOPPED})
    fleet = snapshot(NOW, [*mixed_fleet().instances, line(130, S.PRODUCING, NOW, gpu_model="RTX 3090"), parked])
    texts = [
        effect(directive(CapInstances, 1, max_instances=5), fleet, CONFIGURED, NOW),
        effect(directive(CapBudget, 2, max_usd_per_h=4.0, lasts_h=36), fleet, CONFIGURED, NOW),
        effect(directive(ExcludeGpuModel, 3, gpu_model="rtx 3090"), fleet, CONFIGURED, NOW),
        effect(directive(ExcludeHost, 4, host_id=77), fleet, CONFIGURED, NOW),
        effect(directive(DrainBy, 5, drain_by=NOW + timedelta(hours=3)), fleet, CONFIGURED, NOW),
        effect(directive(SetLever, 6, lever="park", state="off"), None, CONFIGURED, NOW),
        effect(directive(CapInstances, 7, max_instances=5), None, CONFIGURED, NOW),
    ]
    assert texts == [
        "cap 5 machines until 18:00 UTC (configured 40): 10 now, 5 above it will drain after their tasks",
        "$4.00/h until Wed 00:00 UTC (configured $100.00/h): committed $5.40/h now, the 3 dearest per task above it"
        " drain (#131 #500 #501)",
        "no new rtx 3090 until 18:00 UTC: 1 running stay until given back, 1 parked not resumed",
        "nothing new on host 77 until 18:00 UTC: 0 running there stay until given back",
        "every machine given back by 15:00 UTC: 10 now drain from 14:40 UTC, no launch from 13:30 UTC (startup 1.5 h)",
        "park off until 18:00 UTC: no machine is parked; the parked ones are resumed or given back as before",
        "cap 5 machines until 18:00 UTC (configured 40): 0 now, nothing above it (fleet unknown now)",
    ]


# ---- the invariant -------------------------------------------------------------------------------------------

configured_limits = st.builds(
    GuardrailConfig,
    budget_usd_per_h=st.floats(0, 50),
    max_instances=st.integers(0, 40),
    normal_max_price_usd_per_h=st.just(0.8),
    emergency_max_price_usd_per_h=st.just(1.2),
    excluded_gpu_models=st.frozensets(st.sampled_from(["RTX 4090", "RTX 3090"]), max_size=1),
    excluded_host_ids=st.frozensets(st.integers(0, 5), max_size=2),
)


@st.composite
def any_directive(draw: st.DrawFn, number: int) -> Directive:
    set_ago_h = draw(st.floats(-1, 10))
    lasts_h = draw(st.floats(0.1, 12))
    base: dict[str, Any] = {
        "directive_id": number,
        "set_at": NOW - timedelta(hours=set_ago_h),
        "set_by": "ops",
        "via": draw(st.sampled_from(["cli", "agent"])),
        "expires_at": NOW - timedelta(hours=set_ago_h) + timedelta(hours=lasts_h),
    }
    if draw(st.booleans()) and draw(st.booleans()):
        base |= {"revoked_at": NOW - timedelta(minutes=1), "revoked_by": "ops"}
    kind = draw(st.sampled_from(["instances", "budget", "gpu", "host", "drain", "lever"]))
    if kind == "instances":
        return CapInstances(**base, max_instances=draw(st.integers(0, 80)))
    if kind == "budget":
        return CapBudget(**base, max_usd_per_h=draw(st.floats(0, 100)))
    if kind == "gpu":
        return ExcludeGpuModel(**base, gpu_model=draw(st.sampled_from(["RTX 4090", "RTX 3090", "H100"])))
    if kind == "host":
        return ExcludeHost(**base, host_id=draw(st.integers(0, 5)))
    if kind == "drain":
        drain_by = base["set_at"] + timedelta(hours=draw(st.floats(0, 1)) * lasts_h)
        return DrainBy(**base, drain_by=drain_by)
    return SetLever(**base, lever=draw(st.sampled_from(["park", "bids"])), state=draw(st.sampled_from(["on", "off"])))


directive_lists = st.integers(0, 6).flatmap(lambda n: st.tuples(*(any_directive(i + 1) for i in range(n))))


@settings(max_examples=200, deadline=None)
@given(configured=configured_limits, directives=directive_lists)
def test_directives_never_loosen_a_configured_limit(
    configured: GuardrailConfig, directives: tuple[Directive, ...]
) -> None:
    limits = tightened(configured, active_directives(directives, NOW), NOW)
    assert limits.max_instances <= configured.max_instances
    assert limits.budget_usd_per_h <= configured.budget_usd_per_h
    assert limits.excluded_gpu_models >= configured.excluded_gpu_models
    assert limits.excluded_host_ids >= configured.excluded_host_ids


def fleet_of(count: int, gpu_model: str) -> list[InstanceLine]:
    return [line(100 + i, S.PRODUCING, NOW, gpu_model=gpu_model) for i in range(count)]


@settings(max_examples=60, deadline=None)
@given(
    configured=configured_limits,
    directives=directive_lists,
    producers=st.integers(1, 6),
    rate_per_h=st.sampled_from([600.0, 3000.0]),  # demand that launches, unless a limit stops it
)
def test_a_plan_under_directives_stays_within_the_configured_limits_and_every_active_cap(
    configured: GuardrailConfig, directives: tuple[Directive, ...], producers: int, rate_per_h: float
) -> None:
    demand = signal(NOW, state=DemandState.UNDER_PROVISIONED, pending=60, rate_per_h=rate_per_h,
                    producing_workers=producers, above_capacity_for_s=1800)  # fmt: skip
    fleet = snapshot(NOW, fleet_of(producers, "RTX 4090"))
    result = plan_run(demand, fleet, [], NOW, POLICY, configured, run_id="run-0001", directives=directives)
    active = active_directives(directives, NOW)
    launches = [c for c in result.commands if isinstance(c, LaunchInstances)]
    if not launches:
        return
    caps = [configured.max_instances, *(d.max_instances for d in active if isinstance(d, CapInstances))]
    budgets = [configured.budget_usd_per_h, *(d.max_usd_per_h for d in active if isinstance(d, CapBudget))]
    assert result.ledger.instance_count <= min(caps)
    assert result.ledger.committed_usd_per_h <= min(budgets) + 1e-6
    excluded = set(configured.excluded_gpu_models) | {d.gpu_model for d in active if isinstance(d, ExcludeGpuModel)}
    assert all(set(c.exclude_gpu_models) == excluded for c in launches)
    assert not any(isinstance(d, DrainBy) and d.drain_by - timedelta(hours=1.5) <= NOW for d in active)
