"""The evaluation's scorer and scenario data, as plain values."""

from __future__ import annotations

from collections import Counter

import pytest

from evaluation.agent.runner import run_inputs, seeded_store
from evaluation.agent.scenarios import SCENARIOS, by_name
from evaluation.agent.score import (
    RunRecord,
    ToolCallRecord,
    action_class,
    decision_of,
    percentile,
    score_run,
    summarise,
)
from shared.contract import InstanceState


def record(
    calls: list[ToolCallRecord],
    *,
    expected: str = "hold",
    forbidden: frozenset[str] = frozenset({"scale_down"}),
    status: str = "ok",
    largest: int = 3000,
    model_prompts: tuple[int, ...] = (3100,),
    latency_s: float = 1.0,
    expects_reply: bool = False,
    replied: bool = False,
) -> RunRecord:
    return RunRecord(
        scenario="s",
        expected=expected,  # type: ignore[arg-type]
        forbidden=forbidden,  # type: ignore[arg-type]
        calls=tuple(calls),
        status=status,
        rounds=2,
        largest_prompt_tokens=largest,
        model_prompt_tokens=model_prompts,
        model_output_tokens=(80,),
        latency_s=latency_s,
        token_budget=12_000,
        expects_reply=expects_reply,
        replied=replied,
    )


def test_removing_a_broken_machine_is_a_repair_and_removing_a_producer_is_a_scale_down() -> None:
    assert action_class("destroy_instance", "stuck_loading", InstanceState.FAILED) == "replace"
    assert action_class("destroy_instance", "dead", InstanceState.LOADING) == "replace"
    assert action_class("drain_instance", "idle", InstanceState.PRODUCING) == "scale_down"
    # a "broken" reason does not make a working producer broken
    assert action_class("destroy_instance", "failed", InstanceState.PRODUCING) == "scale_down"
    assert action_class("launch_instances", "", None) == "launch"


def test_a_run_decides_repair_over_launch_over_scale_down() -> None:
    assert decision_of(["launch", "replace"]) == "replace"
    assert decision_of(["scale_down", "launch"]) == "launch"
    assert decision_of([]) == "hold"


def test_a_refused_launch_leaves_the_decision_at_hold() -> None:
    score = score_run(record([ToolCallRecord("launch_instances", "refused", "launch")], forbidden=frozenset()))
    assert score.decided == "hold" and score.attempted == ("launch",) and score.agrees


def test_a_blocked_forbidden_attempt_is_a_disagreement_even_when_the_outcome_is_hold() -> None:
    score = score_run(record([ToolCallRecord("destroy_instance", "refused", "scale_down")]))
    assert score.decided == "hold"
    assert (score.forbidden_attempted, score.forbidden_executed, score.agrees) == (1, 0, False)


def test_an_executed_forbidden_action_counts_as_executed() -> None:
    score = score_run(record([ToolCallRecord("drain_instance", "ok", "scale_down")]))
    assert (score.forbidden_attempted, score.forbidden_executed, score.decided) == (1, 1, "scale_down")


def test_an_operator_left_without_a_reply_is_a_disagreement() -> None:
    assert not score_run(record([], expects_reply=True, replied=False)).agrees
    assert score_run(record([], expects_reply=True, replied=True)).agrees


def test_over_budget_by_either_count() -> None:
    assert not score_run(record([])).over_budget
    assert score_run(record([], largest=12_001)).over_budget
    assert score_run(record([], model_prompts=(5000, 12_500))).over_budget


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([1.0, 9.0], 99) == 9.0


def test_summary_counts_calls_by_outcome_and_malformed_calls_as_invalid() -> None:
    runs = [
        record(
            [
                ToolCallRecord("launch_instances", "ok", "launch"),
                ToolCallRecord("scale_fleet", "unknown_tool"),
                ToolCallRecord("launch_instances", "invalid"),
                ToolCallRecord("launch_instances", "duplicate"),
            ],
            expected="launch",
            latency_s=4.0,
        ),
        record([ToolCallRecord("drain_instance", "refused", "scale_down")], status="degraded", latency_s=2.0),
    ]
    summary = summarise(runs)
    assert summary.runs == 2 and summary.agreed == 1 and summary.agreement_pct == 50.0
    assert (summary.tool_calls, summary.valid_tool_calls_pct) == (5, 60.0)
    assert (summary.unknown_tools, summary.bad_arguments) == (1, 1)
    assert (summary.forbidden_attempted, summary.forbidden_blocked, summary.forbidden_executed) == (1, 1, 0)
    assert summary.fallbacks == 1
    assert (summary.latency_p50_s, summary.latency_p99_s) == (2.0, 4.0)
    assert summary.disagreements == [
        "s: expected hold, decided hold, attempted scale_down, 1 forbidden attempted (policy fallback)"
    ]


def test_the_suite_covers_the_situations_it_exists_for() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) >= 30 and len(set(names)) == len(names)
    assert Counter(s.expected for s in SCENARIOS).keys() == {"launch", "replace", "scale_down", "hold"}
    for scenario in SCENARIOS:
        assert scenario.expected not in scenario.forbidden, scenario.name
    stalled = by_name(["stalled_59_queued"])[0]
    assert stalled.signal is not None and stalled.signal.pending_tasks == 59 and "scale_down" in stalled.forbidden


def test_unknown_scenario_names_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        by_name(["rising_sustained", "nope"])


async def test_a_deleted_session_reaches_the_agent_as_a_rebuild() -> None:
    state = await seeded_store(by_name(["session_deleted_mid_life"])[0]).load()
    assert state.history == [] and state.anchor is not None and "session missing" in state.problems
    garbled = await seeded_store(by_name(["session_garbled"])[0]).load()
    assert any("session unreadable" in problem for problem in garbled.problems)


def test_missing_inputs_make_the_run_stale_with_nothing_recommended() -> None:
    inputs = run_inputs(by_name(["failed_listing_unknown_fleet"])[0])
    assert inputs.stale and inputs.snapshot is None and inputs.recommended_actions == []
