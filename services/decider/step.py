"""One decider step: everything a run decides, as a pure function of its inputs and `now`.

Inputs → policy → guardrails → commands and verdicts. The runner adds only the lock, fencing, publishing and the
audit; the world simulator (sim/world) translates its types and calls the same `plan_run`, so what it measures
is the decider itself. An agent's actions pass the same `judge`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from services.decider.decision import policy_actions, without_removals_in_flight
from services.decider.guardrails import (
    FleetLedger,
    GuardrailConfig,
    SentLaunch,
    SentRemoval,
    check,
    ledger_from,
    unobserved_launches,
)
from services.decider.policy import Policy, Recommendation
from shared.contract import Action, DemandSignal, FleetSnapshot, GuardrailVerdict, LaunchInstances

SOURCE = "decider"
# not a guardrail: a run that only an operator's message started answers it and sends nothing (`fleetpilot
# ask` is a question; an instruction the agent should carry out waits for the next run that another trigger starts)
OPERATOR_QUESTION = "operator_question"
NO_INPUTS = "hold: no usable signal or snapshot"


@dataclass(frozen=True)
class RunPlan:
    """What one run decided: the policy's view, its actions, the guardrails' verdict on each, and the ledger as it
    stands once every allowed action is carried out."""

    recommendation: Recommendation | None
    explanation: str  # the audit's recommendation text
    actions: tuple[Action, ...]  # the policy's, before the guardrails (also shown to the agent)
    verdicts: tuple[GuardrailVerdict, ...]  # one per action judged (none while inputs are stale)
    ledger_at_start: FleetLedger  # what the guardrails knew before this plan: the agent acts from here
    ledger: FleetLedger
    pending_launches: int  # launches sent but not in the snapshot yet, as the policy counted them
    policy_error: Exception | None = None  # the policy raised: the run holds, and the runner alerts

    @property
    def commands(self) -> list[Action]:
        """The allowed actions as granted (a launch may be trimmed), in the order they go out."""
        return [verdict.action for verdict in self.verdicts if verdict.verdict == "allowed"]


def judge(
    action: Action, ledger: FleetLedger, now: datetime, guardrails: GuardrailConfig, *, answer_only: bool = False
) -> tuple[GuardrailVerdict, FleetLedger]:
    """The guardrails' verdict on one action (the policy's or the agent's), and the ledger if it is carried out."""
    verdict, after = check(action, ledger, now, guardrails)
    if verdict.verdict == "allowed" and answer_only:
        refused = verdict.model_copy(
            update={
                "verdict": "refused",
                "rule": OPERATOR_QUESTION,
                "explanation": "a run started by an operator's question answers it and sends no command",
            }
        )
        return refused, ledger
    return verdict, after


def ledger_of_totals(committed_usd_per_h: float, instance_count: int, sent: Sequence[SentLaunch]) -> FleetLedger:
    """The guardrails' view of a fleet known only by its totals, for judging launches alone (the world's baseline
    policies): no instance is named, so no removal or resume could pass, and demand counts as present, as it
    does for any launch that interruptible cover reads."""
    return FleetLedger(
        states={},
        committed_usd_per_h=committed_usd_per_h,
        instance_count=instance_count,
        launches=tuple(sent),
        demand_present=True,
        workers_stalled=False,
        stale=False,
    )


def plan_run(
    signal: DemandSignal | None,
    snapshot: FleetSnapshot | None,
    sent: Sequence[SentLaunch],
    now: datetime,
    policy: Policy,
    guardrails: GuardrailConfig,
    *,
    run_id: str,
    stale_inputs: str | None = None,
    answer_only: bool = False,
    ledger: FleetLedger | None = None,
    launched_this_run: int = 0,
    removals: Sequence[SentRemoval] = (),
) -> RunPlan:
    """One run's decisions. `sent`: launches published within the last hour; `removals`: stops and destroys sent
    recently (one not carried out yet is never ordered again). `stale_inputs`: how the inputs are stale, when they
    are (the run then holds and judges nothing). `ledger` and `launched_this_run`: a second plan within a run
    (after a degraded agent) starts from what the run already did."""
    if ledger is None:
        ledger = ledger_from(snapshot, signal, sent, now, stale=stale_inputs is not None, removals=removals)
    pending = sum(p.count for p in unobserved_launches(sent, snapshot, now)) if snapshot else 0
    pending += launched_this_run
    recommendation, error = _recommend(policy, signal, snapshot, now, pending)
    explanation = recommendation.explanation if recommendation else NO_INPUTS
    if stale_inputs is not None:
        explanation = f"hold, inputs stale ({stale_inputs}); policy alone would: {explanation}"
    proposed = policy_actions(recommendation, run_id, now, SOURCE) if recommendation else []
    kept, explanation = without_removals_in_flight(proposed, ledger, explanation)
    actions = tuple(kept)
    verdicts: list[GuardrailVerdict] = []
    after = ledger
    if stale_inputs is None:
        for action in actions:
            verdict, after = judge(action, after, now, guardrails, answer_only=answer_only)
            verdicts.append(verdict)
    explanation += guardrail_note(actions, verdicts)
    return RunPlan(recommendation, explanation, actions, tuple(verdicts), ledger, after, pending, error)


def guardrail_note(proposed: Sequence[Action], verdicts: Sequence[GuardrailVerdict]) -> str:
    """What the guardrails changed of the policy's actions, naming the limit: the explanation never says "launch
    5" where 2 went out. Empty when every action passed as proposed."""
    notes: list[str] = []
    for action, verdict in zip(proposed, verdicts, strict=False):
        if verdict.rule is None or verdict.rule == OPERATOR_QUESTION:
            continue
        granted = verdict.action
        if isinstance(action, LaunchInstances) and isinstance(granted, LaunchInstances):
            if verdict.verdict == "allowed":
                notes.append(f"launch {action.count} -> {granted.count} ({verdict.rule})")
            else:
                notes.append(f"launch {action.count} refused ({verdict.rule})")
        elif verdict.verdict == "refused":
            notes.append(
                f"{getattr(action, 'verb', 'act')} #{getattr(action, 'instance_id', '?')} refused ({verdict.rule})"
            )
    return f"; guardrails: {', '.join(notes)}" if notes else ""


def _recommend(
    policy: Policy, signal: DemandSignal | None, snapshot: FleetSnapshot | None, now: datetime, pending: int
) -> tuple[Recommendation | None, Exception | None]:
    if signal is None or snapshot is None:
        return None, None
    try:
        return policy.recommend(signal, snapshot, now, unobserved_launches=pending), None
    except Exception as error:  # a policy bug on odd data must leave an audited hold, not a silent gap
        return None, error
