"""One decider step: everything a run decides, as a pure function of its inputs and `now`.

Inputs → policy → guardrails → commands and verdicts. The runner adds only the lock, fencing, publishing and the
audit; the world simulator (sim/world) translates its types and calls the same `plan_run`, so what it measures
is the decider itself. An agent's actions pass the same `judge`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from services.decider.decision import (
    REMOVAL_COMMANDS,
    idempotency_key,
    policy_actions,
    without_removals_in_flight,
)
from services.decider.directives import (
    DEFAULT_STARTUP_S,
    DirectiveRemoval,
    active_directives,
    label,
    levers,
    removals_for,
    tightened,
)
from services.decider.guardrails import (
    FleetLedger,
    GuardrailConfig,
    SentLaunch,
    SentRemoval,
    check,
    ledger_from,
    unobserved_launches,
)
from services.decider.policy import Policy, Recommendation, TunablePolicy
from shared.contract import Action, DemandSignal, FleetSnapshot, GuardrailVerdict, LaunchInstances
from shared.contract.directives import Directive, SetLever

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
    directives: tuple[int, ...] = ()  # the operator directives in force for this run, by number (for the audit)
    # the limits this plan was judged by: the configured ones tightened by those directives; an agent's actions in
    # the same run must be judged by these too (`judge(action, ledger, now, plan.guardrails)`)
    guardrails: GuardrailConfig | None = None

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
    directives: Sequence[Directive] = (),
) -> RunPlan:
    """One run's decisions. `sent`: launches published within the last hour; `removals`: stops and destroys sent
    recently (one not carried out yet is never ordered again). `stale_inputs`: how the inputs are stale, when they
    are (the run then holds and judges nothing). `ledger` and `launched_this_run`: a second plan within a run
    (after a degraded agent) starts from what the run already did. `directives`: the operator's, stored; those
    active at `now` set the policy's levers, tighten the guardrails and give machines back."""
    if ledger is None:
        ledger = ledger_from(snapshot, signal, sent, now, stale=stale_inputs is not None, removals=removals)
    pending = sum(p.count for p in unobserved_launches(sent, snapshot, now)) if snapshot else 0
    pending += launched_this_run
    active = active_directives(directives, now)
    recommendation, error = _recommend(_with_levers(policy, active), signal, snapshot, now, pending)
    limits = tightened(guardrails, active, now, startup_s=_startup_s(recommendation)) if active else guardrails
    explanation = recommendation.explanation if recommendation else NO_INPUTS
    if stale_inputs is not None:
        explanation = f"hold, inputs stale ({stale_inputs}); policy alone would: {explanation}"
    proposed = policy_actions(recommendation, run_id, now, SOURCE) if recommendation else []
    kept, explanation = without_removals_in_flight(proposed, ledger, explanation)
    actions = list(kept)
    verdicts: list[GuardrailVerdict] = []
    after = ledger
    if stale_inputs is None:
        for action in actions:
            verdict, after = judge(action, after, now, limits, answer_only=answer_only)
            verdicts.append(verdict)
        # after the policy's own removals, so a machine it already gives back is not counted twice
        leaving = frozenset(after.removals_in_flight) | after.removed
        for removal in removals_for(snapshot, active, now, leaving=leaving):
            action = _directed_command(removal, run_id, len(actions), now)
            verdict, after = judge(action, after, now, limits, answer_only=answer_only)
            actions.append(action)
            verdicts.append(verdict.model_copy(update={"directive_id": removal.directive_id}))
    explanation += guardrail_note(actions, verdicts) + directive_note(active, actions, verdicts)
    ids = tuple(d.directive_id for d in active)
    return RunPlan(
        recommendation, explanation, tuple(actions), tuple(verdicts), ledger, after, pending, error, ids, limits
    )


def _with_levers(policy: Policy, active: Sequence[Directive]) -> Policy:
    """The policy as the lever directives set it (a new object: the configured one is shared across runs)."""
    if not any(isinstance(d, SetLever) for d in active) or not isinstance(policy, TunablePolicy):
        return policy
    return policy.with_config(levers(policy.config, active))


def _startup_s(recommendation: Recommendation | None) -> float:
    """How long a launch now takes to produce: the policy's learned figure, else the design's default."""
    startup_s = recommendation.figures.startup_s if recommendation is not None else 0.0
    return startup_s if startup_s > 0 else DEFAULT_STARTUP_S


def _directed_command(removal: DirectiveRemoval, run_id: str, index: int, now: datetime) -> Action:
    return REMOVAL_COMMANDS[removal.plan.verb](
        occurred_at=now,
        source=SOURCE,
        requested_by="operator",
        idempotency_key=idempotency_key(run_id, index),
        instance_id=removal.plan.instance_id,
        reason=removal.plan.reason,
    )


def guardrail_note(proposed: Sequence[Action], verdicts: Sequence[GuardrailVerdict]) -> str:
    """What the guardrails changed of the policy's actions, naming the limit: the explanation never says "launch
    5" where 2 went out. Empty when every action passed as proposed."""
    notes: list[str] = []
    for action, verdict in zip(proposed, verdicts, strict=False):
        if verdict.rule is None or verdict.rule == OPERATOR_QUESTION or verdict.directive_id is not None:
            continue  # a directive's changes are told under its own number (directive_note)
        if (change := _change(action, verdict)) is not None:
            notes.append(f"{change} ({verdict.rule})")
    return f"; guardrails: {', '.join(notes)}" if notes else ""


def directive_note(
    active: Sequence[Directive], proposed: Sequence[Action], verdicts: Sequence[GuardrailVerdict]
) -> str:
    """What each directive changed, under its number: "; directive #3 cap 10: launch 5 -> 2, drain #101 #102"."""
    changes: dict[int, list[str]] = {}
    given_back: dict[tuple[int, str], list[str]] = {}
    for action, verdict in zip(proposed, verdicts, strict=False):
        if verdict.directive_id is None:
            continue
        if verdict.verdict == "allowed" and not isinstance(action, LaunchInstances):
            given_back.setdefault((verdict.directive_id, str(action.verb)), []).append(f"#{action.instance_id}")
        elif (change := _change(action, verdict)) is not None:
            rule = "" if verdict.rule == "directive" else f" ({verdict.rule})"
            changes.setdefault(verdict.directive_id, []).append(change + rule)
    for (directive_id, verb), ids in given_back.items():
        changes.setdefault(directive_id, []).append(f"{verb} {' '.join(ids)}")
    labels = {d.directive_id: f" {label(d)}" for d in active}
    return "".join(f"; directive #{i}{labels.get(i, '')}: {', '.join(said)}" for i, said in sorted(changes.items()))


def _change(action: Action, verdict: GuardrailVerdict) -> str | None:
    """A verdict with a rule, in a few words (None: an allowed removal or resume, which a rule did not change)."""
    granted = verdict.action
    if isinstance(action, LaunchInstances) and isinstance(granted, LaunchInstances):
        if verdict.verdict == "refused":
            return f"launch {action.count} refused"
        return f"launch {action.count} -> {granted.count}"
    if verdict.verdict == "refused":
        return f"{action.verb} #{getattr(action, 'instance_id', '?')} refused"
    return None


def _recommend(
    policy: Policy, signal: DemandSignal | None, snapshot: FleetSnapshot | None, now: datetime, pending: int
) -> tuple[Recommendation | None, Exception | None]:
    if signal is None or snapshot is None:
        return None, None
    try:
        return policy.recommend(signal, snapshot, now, unobserved_launches=pending), None
    except Exception as error:  # a policy bug on odd data must leave an audited hold, not a silent gap
        return None, error
