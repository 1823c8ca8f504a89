"""The pure pieces of one run: freshness, the policy's actions as commands, the snapshot digest, the outcome."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from services.decider.guardrails import FleetLedger
from services.decider.policy import Recommendation
from shared.contract import (
    Action,
    DataFreshness,
    DecisionRecord,
    DestroyInstance,
    DrainInstance,
    FleetSnapshot,
    GuardrailVerdict,
    LaunchInstances,
    ResumeInstance,
    RunOutcome,
    StopInstance,
    TriggerReason,
    TriggerRef,
)

NEXT_CHECK_MIN_S = 30
NEXT_CHECK_MAX_S = 3600
DIGEST_MAX_CHARS = 4000


def freshness(occurred_at: datetime | None, now: datetime, max_age_s: float) -> DataFreshness:
    if occurred_at is None:
        return "missing"
    return "stale" if (now - occurred_at).total_seconds() > max_age_s else "fresh"


def answers_only(triggers: Sequence[TriggerRef]) -> bool:
    """A run that an operator message is among the triggers of answers and sends no command.

    Only "all triggers are operator messages" used to count: an operator who added a trigger of their own (a
    `config_change`) to a question made its run act on the question's text (security review, issue #24).
    """
    return any(ref.reason is TriggerReason.OPERATOR_MESSAGE for ref in triggers)


def idempotency_key(run_id: str, index: int) -> str:
    """Fresh per run and action; the provisioner acts on a key at most once."""
    return f"{run_id}-{index}"


def without_removals_in_flight(
    actions: Sequence[Action], ledger: FleetLedger, explanation: str
) -> tuple[list[Action], str]:
    """The policy's stops and destroys of machines whose removal an earlier run sent and the fleet does not show
    carried out yet are left out (never ordered twice), and the explanation says which are awaited."""
    kept: list[Action] = []
    awaited: list[str] = []
    for action in actions:
        flying = (
            ledger.removals_in_flight.get(action.instance_id)
            if isinstance(action, StopInstance | DestroyInstance)
            else None
        )
        if flying is None:
            kept.append(action)
        else:
            awaited.append(f"#{flying.instance_id} ({flying.verb} sent {flying.sent_at:%H:%M})")
    if not awaited:
        return kept, explanation
    return kept, f"{explanation}; awaiting removals already sent: {', '.join(awaited)}"


# each removal verb's command
REMOVAL_COMMANDS: dict[str, type[DrainInstance] | type[StopInstance] | type[DestroyInstance]] = {
    "drain": DrainInstance,
    "stop": StopInstance,
    "destroy": DestroyInstance,
}


def policy_actions(recommendation: Recommendation, run_id: str, now: datetime, source: str) -> list[Action]:
    """The recommendation as contract commands (resumes and launches first: capacity before removals)."""
    actions: list[Action] = []
    common = {"occurred_at": now, "source": source, "requested_by": "policy"}
    # parked machines first: the launches were reduced by as many as are resumed
    for resume in recommendation.resumes:
        actions.append(
            ResumeInstance(
                idempotency_key=idempotency_key(run_id, len(actions)),
                instance_id=resume.instance_id,
                reason=resume.reason,
                **common,
            )
        )
    for plan in recommendation.launches:
        actions.append(
            LaunchInstances(
                idempotency_key=idempotency_key(run_id, len(actions)),
                count=plan.count,
                gpu_models=list(plan.gpu_models),
                launch_priority=plan.launch_priority,
                reason=plan.reason,
                interruptible=plan.interruptible,
                bid_markup=plan.bid_markup,
                **common,
            )
        )
    for removal in recommendation.removals:
        actions.append(
            REMOVAL_COMMANDS[removal.verb](
                idempotency_key=idempotency_key(run_id, len(actions)),
                instance_id=removal.instance_id,
                reason=removal.reason,
                **common,
            )
        )
    return actions


def snapshot_digest(snapshot: FleetSnapshot | None) -> str:
    if snapshot is None:
        return "no fleet snapshot"
    counts = ", ".join(f"{state.value} {n}" for state, n in sorted(snapshot.counts_by_state.items()) if n)
    head = (
        f"snapshot {snapshot.event_id} at {snapshot.occurred_at.isoformat()}: {len(snapshot.instances)} instances"
        f" ({counts or 'none'}), ${snapshot.spend_usd_per_h:.2f}/h"
    )
    lines = [head, *(line.line for line in snapshot.instances)]
    text = "\n".join(lines)
    if len(text) > DIGEST_MAX_CHARS:
        text = text[: DIGEST_MAX_CHARS - 40].rsplit("\n", 1)[0] + f"\n… {len(snapshot.instances)} instances in all"
    return text


def clamp_next_check_s(seconds: int | None) -> int | None:
    if seconds is None:
        return None
    return max(NEXT_CHECK_MIN_S, min(NEXT_CHECK_MAX_S, int(seconds)))


def run_outcome(
    *, stale: bool, degraded: bool, verdicts: Sequence[GuardrailVerdict], commands_sent: Sequence[str]
) -> RunOutcome:
    if stale:
        return "stale"
    if degraded:
        return "degraded"
    if commands_sent:
        return "acted"
    if any(v.verdict == "refused" for v in verdicts):
        return "refused"
    return "hold"


def reply_without_agent(
    explanation: str, verdicts: Sequence[GuardrailVerdict], *, answer_only: bool, last: DecisionRecord | None
) -> str:
    """The decider's answer to an operator when no agent does: what the policy decided, or for a question alone
    what it would do and the last decision."""
    if answer_only:
        text = (
            f"The agent is not available. Now: {explanation}. Your question starts no action."
            f"{previous_decision_line(last)}"
        )
    else:
        done = [v.explanation for v in verdicts if v.verdict == "allowed"]
        text = (
            "The agent is not available; the deterministic policy decided. "
            f"{explanation}. Actions: {'; '.join(done) if done else 'none'}."
        )
    return text[:8000]


def previous_decision_line(record: DecisionRecord | None) -> str:
    """The last decision of this replica as one sentence of a reply (the audit trail has every one)."""
    if record is None:
        return " No decision recorded by this replica yet (`fleetpilot audit tail` shows every replica's)."
    sent = record.commands_sent or record.commands_withheld
    what = f"{'withheld (shadow mode)' if record.commands_withheld else 'sent'}: {', '.join(sent)}" if sent else "none"
    return (
        f" Last decision, run {record.run_id} at {record.finished_at:%Y-%m-%d %H:%M} UTC: {record.outcome};"
        f" {record.recommendation[:1000]}; commands {what}."
    )
