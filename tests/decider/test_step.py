"""The decider's step on plain contract messages: the policy's actions judged in order, holds on stale inputs, an
operator's question refused, a policy bug held, a second plan counting what the run already launched."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from services.decider.guardrails import GuardrailConfig, GuardrailRule
from services.decider.policy import PolicyConfig, PredictivePolicy, Recommendation
from services.decider.step import OPERATOR_QUESTION, ledger_of_totals, plan_run
from shared.contract import (
    Action,
    DemandSignal,
    DemandState,
    DestroyInstance,
    FleetSnapshot,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    ParkReason,
    RemovalReason,
)
from tests.decider.factories import line, producing, signal, snapshot

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
POLICY = PredictivePolicy(PolicyConfig())
# room for 5 more machines at the normal cap's $0.80/h beside two producing at $0.50/h
GUARDRAILS = GuardrailConfig(budget_usd_per_h=5.0, max_instances=40, normal_max_price_usd_per_h=0.8,
                             emergency_max_price_usd_per_h=1.2)  # fmt: skip


def short_fleet() -> tuple[DemandSignal, FleetSnapshot]:
    """600 tasks/h sustained against 2 machines: the policy launches more than the budget allows."""
    demand = signal(NOW, state=DemandState.UNDER_PROVISIONED, pending=60, rate_per_h=600, producing_workers=2,
                    above_capacity_for_s=1800)  # fmt: skip
    return demand, snapshot(NOW, producing(2, NOW))


def launched(commands: Sequence[Action]) -> int:
    return sum(c.count for c in commands if isinstance(c, LaunchInstances))


def test_every_action_is_judged_in_order_on_the_ledger_the_ones_before_left() -> None:
    demand, fleet = short_fleet()
    # a bid paused by a higher one: the policy replaces it, launches for the sustained demand, and gives it up
    paused = line(300, InstanceState.PARKED, NOW).model_copy(update={"park_reason": ParkReason.OUTBID})
    fleet = snapshot(NOW, [*fleet.instances, paused])
    plan = plan_run(demand, fleet, [], NOW, POLICY, GUARDRAILS, run_id="run-0001")
    reasons = [LaunchReason.REPLACEMENT, LaunchReason.SUSTAINED_DEMAND, RemovalReason.OUTBID]
    assert [a.reason for a in plan.actions] == reasons
    assert [v.action.idempotency_key for v in plan.verdicts] == [a.idempotency_key for a in plan.actions]
    # $1.50/h committed: the replacement takes $0.80 of the $3.50 left, and the budget trims the next launch to 3
    assert [(launched([v.action]), v.verdict, v.rule) for v in plan.verdicts] == [
        (1, "allowed", None),
        (3, "allowed", GuardrailRule.BUDGET.value),
        (0, "allowed", None),
    ]
    assert isinstance(plan.commands[2], DestroyInstance) and plan.commands[2].instance_id == 300
    assert plan.ledger.instance_count == plan.ledger_at_start.instance_count + 4
    assert [s.count for s in plan.ledger.launches] == [1, 3]
    assert plan.ledger.removed == {300}


def test_stale_inputs_hold_and_judge_nothing() -> None:
    demand, fleet = short_fleet()
    plan = plan_run(demand, fleet, [], NOW, POLICY, GUARDRAILS, run_id="run-0001", stale_inputs="signal stale")
    assert plan.actions and not plan.verdicts and not plan.commands
    assert plan.explanation.startswith("hold, inputs stale (signal stale); policy alone would: ")
    assert plan.ledger_at_start.stale


def test_a_run_an_operator_question_started_refuses_every_action() -> None:
    demand, fleet = short_fleet()
    plan = plan_run(demand, fleet, [], NOW, POLICY, GUARDRAILS, run_id="run-0001", answer_only=True)
    assert plan.verdicts and {(v.verdict, v.rule) for v in plan.verdicts} == {("refused", OPERATOR_QUESTION)}
    assert plan.ledger == plan.ledger_at_start


class BrokenPolicy:
    name = "broken"

    def recommend(self, *args: object, **kwargs: object) -> Recommendation:
        raise ZeroDivisionError("odd data")


def test_a_policy_that_raises_leaves_a_hold_with_its_error() -> None:
    demand, fleet = short_fleet()
    plan = plan_run(demand, fleet, [], NOW, BrokenPolicy(), GUARDRAILS, run_id="run-0001")
    assert plan.recommendation is None and not plan.actions and not plan.verdicts
    assert isinstance(plan.policy_error, ZeroDivisionError)


def test_a_second_plan_in_a_run_counts_what_the_run_already_launched() -> None:
    demand, fleet = short_fleet()
    first = plan_run(demand, fleet, [], NOW, POLICY, GUARDRAILS, run_id="run-0001")
    wanted = first.recommendation.launch_count if first.recommendation else 0
    again = plan_run(demand, fleet, [], NOW, POLICY, GUARDRAILS, run_id="run-0001-p", ledger=first.ledger,
                     launched_this_run=3)  # fmt: skip
    assert again.pending_launches == 3
    assert again.recommendation is not None and again.recommendation.launch_count == wanted - 3
    assert launched(again.commands) == 0  # the first plan's launches already took the budget


def test_a_fleet_known_by_its_totals_is_judged_by_the_same_launch_rules() -> None:
    demand, fleet = short_fleet()
    plan = plan_run(demand, fleet, [], NOW, POLICY, GUARDRAILS, run_id="run-0001")
    totals = ledger_of_totals(fleet.spend_usd_per_h, len(fleet.instances), [])
    assert totals.committed_usd_per_h == plan.ledger_at_start.committed_usd_per_h
    assert totals.instance_count == plan.ledger_at_start.instance_count


def test_the_explanation_says_what_the_guardrails_cut_and_names_the_limit() -> None:
    demand, fleet = short_fleet()
    plan = plan_run(demand, fleet, [], NOW, POLICY, GUARDRAILS, run_id="run-0001")
    [launch] = plan.actions
    assert isinstance(launch, LaunchInstances) and launch.count > 5
    assert plan.explanation.startswith(f"launch {launch.count} (")
    assert plan.explanation.endswith(f"; guardrails: launch {launch.count} -> 5 ({GuardrailRule.BUDGET.value})")
    # nothing cut: nothing said
    roomy = GuardrailConfig(budget_usd_per_h=100.0, max_instances=100, normal_max_price_usd_per_h=0.8,
                            emergency_max_price_usd_per_h=1.2)  # fmt: skip
    assert "guardrails:" not in plan_run(demand, fleet, [], NOW, POLICY, roomy, run_id="run-0002").explanation
