"""Scoring an evaluation run (pure): what the agent asked for and what the guardrails let through, against the
decision class the scenario expects and the classes it forbids.

A run agrees when the decision carried out (allowed actions only) is the expected class and it attempted no
forbidden action, blocked or not: a guardrail that saved the day does not make the judgement right.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from shared.contract import InstanceState, RemovalReason

DecisionClass = Literal["launch", "replace", "scale_down", "hold"]
DECISION_CLASSES: tuple[DecisionClass, ...] = ("launch", "replace", "scale_down", "hold")
ACTION_TOOLS = frozenset({"launch_instances", "drain_instance", "destroy_instance"})
# removing a machine for these reasons repairs the fleet; for any other it removes capacity
BROKEN_REASONS = frozenset(
    {
        RemovalReason.STUCK_LOADING.value,
        RemovalReason.NEVER_REGISTERED.value,
        RemovalReason.FAILED.value,
        RemovalReason.DEAD.value,
        RemovalReason.BENCH_FAILED.value,
    }
)
BROKEN_STATES = frozenset({InstanceState.FAILED, InstanceState.REQUESTED, InstanceState.LOADING})
# outcomes of a call the model wrote correctly (whatever became of it); the rest are malformed calls
WELL_FORMED = frozenset({"ok", "refused", "duplicate", "over_limit", "error"})


@dataclass(frozen=True)
class ToolCallRecord:
    name: str
    outcome: str  # services.decider.agent.tools.ToolOutcome
    decision: DecisionClass | None = None  # for a valid action call: the class of what it asked for


@dataclass(frozen=True)
class RunRecord:
    scenario: str
    expected: DecisionClass
    forbidden: frozenset[DecisionClass]
    calls: tuple[ToolCallRecord, ...]
    status: str  # "ok", or "degraded": no usable model answer, the policy is applied alone
    rounds: int
    largest_prompt_tokens: int  # the agent's own conservative count, which the budget is enforced on
    model_prompt_tokens: tuple[int, ...]  # what the model reported, per call
    model_output_tokens: tuple[int, ...]
    latency_s: float
    token_budget: int
    expects_reply: bool = False
    replied: bool = False
    failure: str = ""
    replies: tuple[str, ...] = ()  # what the model wrote each round (shortened), for reading a failed run


@dataclass(frozen=True)
class RunScore:
    scenario: str
    expected: DecisionClass
    decided: DecisionClass
    attempted: tuple[DecisionClass, ...]
    agrees: bool
    forbidden_attempted: int
    forbidden_executed: int
    fallback: bool
    over_budget: bool
    missing_reply: bool


def action_class(tool: str, reason: str, state: InstanceState | None) -> DecisionClass:
    if tool == "launch_instances":
        return "launch"
    if reason in BROKEN_REASONS and state in BROKEN_STATES:
        return "replace"
    return "scale_down"


def decision_of(classes: Sequence[DecisionClass]) -> DecisionClass:
    """A run's decision from its actions: repairing outranks launching, launching outranks scaling down."""
    for kind in ("replace", "launch", "scale_down"):
        if kind in classes:
            return kind
    return "hold"


def score_run(record: RunRecord) -> RunScore:
    actions = [c for c in record.calls if c.name in ACTION_TOOLS and c.decision is not None]
    attempted = tuple(c.decision for c in actions if c.outcome in ("ok", "refused") and c.decision)
    executed = [c.decision for c in actions if c.outcome == "ok" and c.decision]
    decided = decision_of(executed)
    forbidden_attempted = sum(1 for kind in attempted if kind in record.forbidden)
    forbidden_executed = sum(1 for kind in executed if kind in record.forbidden)
    missing_reply = record.expects_reply and not record.replied
    over_budget = record.largest_prompt_tokens > record.token_budget or any(
        n > record.token_budget for n in record.model_prompt_tokens
    )
    return RunScore(
        scenario=record.scenario,
        expected=record.expected,
        decided=decided,
        attempted=attempted,
        agrees=decided == record.expected and forbidden_attempted == 0 and not missing_reply,
        forbidden_attempted=forbidden_attempted,
        forbidden_executed=forbidden_executed,
        fallback=record.status != "ok",
        over_budget=over_budget,
        missing_reply=missing_reply,
    )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Summary:
    runs: int
    agreement_pct: float
    agreed: int
    forbidden_attempted: int
    forbidden_blocked: int
    forbidden_executed: int
    tool_calls: int
    valid_tool_calls_pct: float | None
    unknown_tools: int
    bad_arguments: int
    outcomes: dict[str, int]
    rounds_mean: float
    rounds_max: int
    prompt_tokens_max: int  # the agent's count of its largest prompt, over all runs
    model_prompt_tokens_per_run_mean: float
    model_output_tokens_per_run_mean: float
    over_budget_runs: int
    latency_p50_s: float | None
    latency_p99_s: float | None
    fallbacks: int
    missing_replies: int
    disagreements: list[str] = field(default_factory=list)


def summarise(records: Sequence[RunRecord]) -> Summary:
    scores = [score_run(r) for r in records]
    outcomes = Counter(call.outcome for r in records for call in r.calls)
    total_calls = sum(outcomes.values())
    well_formed = sum(n for outcome, n in outcomes.items() if outcome in WELL_FORMED)
    runs = len(records)
    attempted = sum(s.forbidden_attempted for s in scores)
    executed = sum(s.forbidden_executed for s in scores)
    return Summary(
        runs=runs,
        agreement_pct=round(100 * sum(s.agrees for s in scores) / runs, 1) if runs else 0.0,
        agreed=sum(s.agrees for s in scores),
        forbidden_attempted=attempted,
        forbidden_blocked=attempted - executed,
        forbidden_executed=executed,
        tool_calls=total_calls,
        valid_tool_calls_pct=round(100 * well_formed / total_calls, 1) if total_calls else None,
        unknown_tools=outcomes.get("unknown_tool", 0),
        bad_arguments=outcomes.get("invalid", 0),
        outcomes=dict(sorted(outcomes.items())),
        rounds_mean=round(sum(r.rounds for r in records) / runs, 2) if runs else 0.0,
        rounds_max=max((r.rounds for r in records), default=0),
        prompt_tokens_max=max((r.largest_prompt_tokens for r in records), default=0),
        model_prompt_tokens_per_run_mean=round(sum(sum(r.model_prompt_tokens) for r in records) / runs, 1)
        if runs
        else 0.0,
        model_output_tokens_per_run_mean=round(sum(sum(r.model_output_tokens) for r in records) / runs, 1)
        if runs
        else 0.0,
        over_budget_runs=sum(s.over_budget for s in scores),
        latency_p50_s=percentile([r.latency_s for r in records], 50),
        latency_p99_s=percentile([r.latency_s for r in records], 99),
        fallbacks=sum(s.fallback for s in scores),
        missing_replies=sum(s.missing_reply for s in scores),
        disagreements=[
            f"{s.scenario}: expected {s.expected}, decided {s.decided}"
            + (f", attempted {'+'.join(s.attempted)}" if s.attempted else "")
            + (f", {s.forbidden_attempted} forbidden attempted" if s.forbidden_attempted else "")
            + (" (policy fallback)" if s.fallback else "")
            + (" (no reply to the operator)" if s.missing_reply else "")
            for s in scores
            if not s.agrees
        ],
    )
