"""Runs the evaluation: each scenario through the real agent (`OllamaAgent`) against any Ollama host, with the
decider's real policy writing the recommendation and the real guardrails judging every action (a dry run:
nothing is published). One fresh agent and state store per scenario, so runs do not leak into each other."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ollama import ChatResponse
from prometheus_client import CollectorRegistry

from evaluation.agent.dryrun import DryRunPorts
from evaluation.agent.scenarios import NOW, EvalScenario
from evaluation.agent.score import (
    ACTION_TOOLS,
    RunRecord,
    Summary,
    ToolCallRecord,
    action_class,
    score_run,
    summarise,
)
from services.decider.advisor import RunInputs
from services.decider.agent.agent import OllamaAgent
from services.decider.agent.config import AgentConfig
from services.decider.agent.context import Turn
from services.decider.agent.store import InMemoryAgentStore
from services.decider.decision import policy_actions
from services.decider.policy import PredictivePolicy
from shared.clock import SimulatedClock
from shared.contract import DemandState, OperatorMessage, TriggerReason, TriggerRef
from shared.settings import Settings

SOURCE = "decider"
# the limits the scenarios are written against (budget_nearly_spent, at_max_instances)
EVAL_BUDGET_USD_PER_H = 20.0
EVAL_MAX_INSTANCES = 40
REPLY_SHOWN_CHARS = 400


class MeasuredAgent(OllamaAgent):
    """The agent unchanged, noting what the model reports for each call (token counts)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_counts: list[int] = []
        self.output_counts: list[int] = []
        self.replies: list[str] = []  # what the model wrote, shortened: to see why a run went wrong

    async def chat(
        self,
        messages: list[Turn],
        schemas: list[dict[str, object]],
        *,
        answer_schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResponse:
        response = await super().chat(messages, schemas, answer_schema=answer_schema, max_tokens=max_tokens)
        if response.prompt_eval_count is not None:
            self.prompt_counts.append(response.prompt_eval_count)
        if response.eval_count is not None:
            self.output_counts.append(response.eval_count)
        calls = [
            f"{c.function.name}({json.dumps(dict(c.function.arguments or {}))})"
            for c in response.message.tool_calls or []
        ]
        self.replies.append(((response.message.content or "") + " " + " ".join(calls)).strip()[:REPLY_SHOWN_CHARS])
        return response


def eval_settings(host: str, model: str) -> Settings:
    return Settings(
        ollama_host=host,
        ollama_model=model,
        budget_usd_per_h=EVAL_BUDGET_USD_PER_H,
        max_instances=EVAL_MAX_INSTANCES,
    )


def run_inputs(scenario: EvalScenario) -> RunInputs:
    """What the decider would hand the agent: the policy's recommendation on the same snapshot and signal."""
    run_id = f"eval-{scenario.name}"
    stale = scenario.stale or scenario.signal is None or scenario.snapshot is None
    recommendation = None
    if scenario.signal is not None and scenario.snapshot is not None:
        recommendation = PredictivePolicy().recommend(scenario.signal, scenario.snapshot, NOW)
    explanation = recommendation.explanation if recommendation else "hold: no usable signal or snapshot"
    if stale:
        explanation = f"hold, inputs stale or missing; policy alone would: {explanation}"
    triggers = [TriggerRef(priority="p1", reason=TriggerReason.DEMAND_STATE_CHANGE)]
    if scenario.signal is not None and scenario.signal.state is DemandState.WORKERS_STALLED:
        triggers = [TriggerRef(priority="p0", reason=TriggerReason.WORKERS_STALLED)]
    messages = [
        OperatorMessage(occurred_at=NOW, source="cli", conversation_id=f"{run_id}-conv", operator="operator", text=text)
        for text in scenario.operator_messages
    ]
    triggers += [
        TriggerRef(priority="p0", reason=TriggerReason.OPERATOR_MESSAGE, event_id=m.event_id) for m in messages
    ]
    return RunInputs(
        run_id=run_id,
        now=NOW,
        triggers=triggers,
        signal=scenario.signal,
        snapshot=scenario.snapshot,
        recommendation=explanation,
        recommended_actions=policy_actions(recommendation, run_id, NOW, SOURCE) if recommendation else [],
        operator_messages=messages,
        stale=stale,
    )


def seeded_store(scenario: EvalScenario) -> InMemoryAgentStore:
    """The state earlier runs left, stored as the agent stores it, then damaged as the scenario says."""
    store = InMemoryAgentStore()
    dump = json.dumps
    if scenario.history:
        store.values["session"] = dump([turn.model_dump(mode="json") for turn in scenario.history])
    if scenario.anchor is not None:
        store.values["anchor"] = scenario.anchor.model_dump_json()
    if scenario.memories:
        store.values["memories"] = dump([memory.model_dump(mode="json") for memory in scenario.memories])
    for part, raw in scenario.damaged_store.items():
        if raw is None:
            store.values.pop(part, None)
        else:
            store.values[part] = raw
    return store


@dataclass(frozen=True)
class EvalTarget:
    host: str
    model: str
    label: str


def _call_records(agent: MeasuredAgent, inputs: RunInputs) -> tuple[ToolCallRecord, ...]:
    states = {line.instance_id: line.state for line in inputs.snapshot.instances} if inputs.snapshot else {}
    run = agent.last_run
    records = []
    for entry in run.tool_log if run else []:
        decision = None
        if entry.name in ACTION_TOOLS and entry.outcome in ("ok", "refused"):
            instance_id = entry.arguments.get("instance_id")
            state = states.get(instance_id) if isinstance(instance_id, int) else None
            decision = action_class(entry.name, str(entry.arguments.get("reason", "")), state)
        records.append(ToolCallRecord(entry.name, entry.outcome, decision))
    return tuple(records)


async def run_scenario(scenario: EvalScenario, target: EvalTarget, config: AgentConfig) -> RunRecord:
    settings = eval_settings(target.host, target.model)
    inputs = run_inputs(scenario)
    ports = DryRunPorts.for_inputs(
        settings, inputs, offers_per_query=scenario.offers_per_query, offer_note=scenario.offer_note
    )
    agent = MeasuredAgent(
        settings=settings,
        clock=SimulatedClock(NOW),
        store=seeded_store(scenario),
        registry=CollectorRegistry(),
        config=config,
    )
    started = time.perf_counter()
    try:
        outcome = await agent.advise(inputs, ports)
    finally:
        latency_s = time.perf_counter() - started
        await agent.aclose()
    trace = outcome.trace
    return RunRecord(
        scenario=scenario.name,
        expected=scenario.expected,
        forbidden=scenario.forbidden,
        calls=_call_records(agent, inputs),
        status=outcome.status,
        rounds=trace.rounds,
        largest_prompt_tokens=trace.prompt_tokens,
        model_prompt_tokens=tuple(agent.prompt_counts),
        model_output_tokens=tuple(agent.output_counts),
        latency_s=round(latency_s, 3),
        token_budget=config.token_budget,
        expects_reply=bool(scenario.operator_messages),
        replied=bool(ports.replies),
        failure="" if outcome.status == "ok" else trace.decision[:300],
        replies=tuple(agent.replies),
    )


async def evaluate(
    scenarios: list[EvalScenario],
    target: EvalTarget,
    config: AgentConfig,
    progress: Callable[[RunRecord], None] | None = None,
) -> tuple[list[RunRecord], Summary]:
    records = []
    for scenario in scenarios:
        record = await run_scenario(scenario, target, config)
        records.append(record)
        if progress:
            progress(record)
    return records, summarise(records)


def record_json(record: RunRecord) -> dict[str, Any]:
    score = score_run(record)
    data = asdict(record)
    data["forbidden"] = sorted(record.forbidden)
    data["calls"] = [asdict(call) for call in record.calls]
    return {**data, "score": {**asdict(score), "attempted": list(score.attempted)}}


def run_line(record: RunRecord) -> str:
    score = score_run(record)
    mark = "ok " if score.agrees else "NO "
    calls = ",".join(f"{c.name}:{c.outcome}" for c in record.calls) or "-"
    extra = " fallback" if score.fallback else ""
    return (
        f"{mark} {record.scenario:<38} expected {record.expected:<10} decided {score.decided:<10} "
        f"rounds {record.rounds} prompt {record.largest_prompt_tokens:>5} tok {record.latency_s:7.1f} s{extra}  "
        f"[{calls[:160]}]"
    )


def summary_table(label: str, summary: Summary) -> str:
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} s"

    valid = "-" if summary.valid_tool_calls_pct is None else f"{summary.valid_tool_calls_pct:.1f} %"
    rows = [
        ("runs", str(summary.runs)),
        ("decision agreement", f"{summary.agreement_pct:.1f} % ({summary.agreed}/{summary.runs})"),
        (
            "forbidden actions",
            f"{summary.forbidden_attempted} attempted, {summary.forbidden_blocked} blocked, "
            f"{summary.forbidden_executed} executed",
        ),
        ("valid tool calls", f"{valid} of {summary.tool_calls}"),
        ("unknown tools / bad arguments", f"{summary.unknown_tools} / {summary.bad_arguments}"),
        ("rounds per run", f"mean {summary.rounds_mean}, max {summary.rounds_max}"),
        (
            "tokens per run (model's count)",
            f"prompt {summary.model_prompt_tokens_per_run_mean:.0f}, output "
            f"{summary.model_output_tokens_per_run_mean:.0f}",
        ),
        ("largest prompt (agent's count)", f"{summary.prompt_tokens_max}; runs over budget {summary.over_budget_runs}"),
        ("run latency", f"p50 {seconds(summary.latency_p50_s)}, p99 {seconds(summary.latency_p99_s)}"),
        ("fallbacks to the policy", str(summary.fallbacks)),
        ("operator left without reply", str(summary.missing_replies)),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"== {label} =="] + [f"  {name:<{width}}  {value}" for name, value in rows]
    lines += [f"  disagrees: {line}" for line in summary.disagreements]
    return "\n".join(lines)
