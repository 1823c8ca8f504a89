"""The context manager, directly: compaction keeps the gist, the budget is never exceeded, the fixed parts stay."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.decider.agent.context import (
    ContextBudgetError,
    ToolRequest,
    Turn,
    call_key,
    cap_output,
    compact,
    fit_to_budget,
    trim_history,
    units,
)
from services.decider.agent.tokens import estimate_tokens, estimate_tools_tokens
from services.decider.agent.tools import tool_schemas
from sim.ollama.tokens import count_prompt, count_text

SYSTEM = Turn(role="system", kind="system", content="background\nhow to\nCRITICAL RULES: never scale down blindly")
ANCHOR = Turn(role="user", kind="anchor", content='SESSION ANCHOR: {"last_run_id": "r0"}')


def observation(run_id: str, size: int = 200) -> Turn:
    return Turn(
        role="user",
        kind="observation",
        content=f"RUN {run_id}\n" + "fleet line #1234 RTX 4090 $0.50/h\n" * (size // 34),
        gist=f"[earlier observation, run {run_id}]",
        run_id=run_id,
    )


def tool_exchange(run_id: str, n: int, size: int = 3000) -> list[Turn]:
    request = Turn(
        role="assistant",
        kind="tool_request",
        content="",
        tool_calls=[ToolRequest(name="get_offers", arguments={"max_price": n})],
        run_id=run_id,
    )
    result = Turn(
        role="tool",
        kind="tool_result",
        content=f"offer #{n} RTX 4090 $0.41/h\n" * (size // 27),
        tool_name="get_offers",
        gist=f"[compacted: get_offers → 12 offers, best #{n} RTX 4090 $0.41/h]",
        run_id=run_id,
    )
    return [request, result]


def answer(run_id: str) -> Turn:
    return Turn(role="assistant", kind="answer", content="OBSERVATION: a\nASSESSMENT: b\nDECISION: hold", run_id=run_id)


def test_tool_results_older_than_the_last_five_messages_become_their_gist() -> None:
    turns = [observation("r1")]
    for n in range(4):
        turns += tool_exchange("r1", n)
    compacted = compact(turns, "r1", keep_recent=5)
    results = [t for t in compacted if t.kind == "tool_result"]
    # nine messages: observation, then four (request, result) pairs; the last five start at the second result
    assert results[0].content == "[compacted: get_offers → 12 offers, best #0 RTX 4090 $0.41/h]"
    assert [r.content.split(" ")[1] for r in results[1:]] == ["#1", "#2", "#3"]  # within the last five: whole
    assert compacted[0].content == turns[0].content  # this run's observation stays whole


def test_earlier_runs_observations_become_their_summary_and_long_answers_shrink() -> None:
    long_answer = Turn(role="assistant", kind="answer", content="DECISION: " + "x" * 5000, run_id="r1")
    turns = [observation("r1"), long_answer, observation("r2")]
    compacted = compact(turns, "r2", keep_recent=5)
    assert compacted[0].content == "[earlier observation, run r1]"
    assert len(compacted[1].content) < 1100 and compacted[1].content.endswith("[shortened]")
    assert compacted[2].content.startswith("RUN r2")


def test_fit_drops_the_oldest_history_first_and_keeps_system_anchor_and_observation() -> None:
    history = []
    for run in ("r1", "r2", "r3"):
        history += [observation(run), *tool_exchange(run, 1), answer(run)]
    history = compact(history, "r4", keep_recent=0)
    current = [observation("r4", size=2000)]
    tools_tokens = 500
    all_tokens = sum(t.tokens for t in [SYSTEM, ANCHOR, *history, *current]) + tools_tokens
    budget = all_tokens - 1  # just too much: one unit has to go
    fit = fit_to_budget([SYSTEM, ANCHOR], history, current, tools_tokens, budget)
    assert fit.tokens <= budget
    assert fit.messages[:2] == [SYSTEM, ANCHOR]
    assert fit.messages[2] == history[1]  # the oldest unit (r1's observation) went first
    assert fit.messages[-1] == current[0]
    assert fit.dropped_turns == 1 and not fit.observation_cut


def test_fit_never_splits_a_tool_request_from_its_results() -> None:
    history = [observation("r1"), *tool_exchange("r1", 1), *tool_exchange("r1", 2), answer("r1")]
    current = [observation("r2")]
    for budget in range(1500, 4000, 37):
        fit = fit_to_budget([SYSTEM], history, current, 0, budget)
        for before, turn in zip(fit.messages, fit.messages[1:], strict=False):
            if turn.kind == "tool_result":
                assert before.kind in ("tool_request", "tool_result")


def test_when_even_the_observation_is_too_big_it_is_cut_and_says_so() -> None:
    current = [observation("r1", size=40_000)]
    fit = fit_to_budget([SYSTEM, ANCHOR], [], current, 100, 3000)
    assert fit.tokens <= 3000
    assert fit.observation_cut
    assert fit.messages[-1].content.endswith("[observation cut to fit the token budget]")


def test_fixed_parts_over_the_budget_are_a_configuration_error() -> None:
    with pytest.raises(ContextBudgetError, match="over the budget"):
        fit_to_budget([SYSTEM, ANCHOR], [], [observation("r1")], 10_000, 2_000)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=6000), min_size=0, max_size=30),
    observation_size=st.integers(min_value=0, max_value=30_000),
    budget=st.integers(min_value=600, max_value=20_000),
)
def test_the_budget_is_never_exceeded_and_the_fixed_parts_always_lead(
    sizes: list[int], observation_size: int, budget: int
) -> None:
    history: list[Turn] = []
    for n, size in enumerate(sizes):
        history += tool_exchange(f"h{n}", n, size) if n % 2 else [observation(f"h{n}", size), answer(f"h{n}")]
    current = [observation("now", observation_size), *tool_exchange("now", 99, 2000)]
    combined = compact([*history, *current], "now", 5)
    fit = fit_to_budget([SYSTEM, ANCHOR], combined[: len(history)], combined[len(history) :], 200, budget)
    assert fit.tokens <= budget
    assert fit.tokens == sum(t.tokens for t in fit.messages) + 200
    assert fit.messages[:2] == [SYSTEM, ANCHOR]
    assert any(t.kind == "observation" and t.run_id == "now" for t in fit.messages)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_the_conservative_count_is_never_below_the_stand_ins_model_like_count(text: str) -> None:
    assert estimate_tokens(text) >= count_text(text)


def test_a_whole_request_counts_at_least_what_the_stand_in_counts_on_arrival() -> None:
    turns = [SYSTEM, ANCHOR, observation("r1", 3000), *tool_exchange("r1", 7, 2000), answer("r1")]
    schemas = tool_schemas(["c1", "c2"])
    ours = sum(t.tokens for t in turns) + estimate_tools_tokens(schemas)
    arrived = count_prompt(json.loads(json.dumps([t.wire() for t in turns])), schemas)
    assert ours >= arrived


def test_cap_output_cuts_says_so_and_says_how_to_get_more() -> None:
    text = "\n".join(f"#{n} RTX 4090 $0.41/h somewhere far away" for n in range(500))
    capped = cap_output(text, 1000, "Call get_offers with a lower max_price.")
    assert len(capped) <= 1000
    assert f"[cut: output was {len(text)} chars, showing the first" in capped
    assert capped.endswith("Call get_offers with a lower max_price.]")
    assert cap_output("short", 1000, "more") == "short"


def test_duplicate_calls_are_recognised_whatever_the_key_order() -> None:
    assert call_key("get_offers", {"a": 1, "b": [1, 2]}) == call_key("get_offers", {"b": [1, 2], "a": 1})
    assert call_key("get_offers", {"a": 1}) != call_key("get_offers", {"a": 2})
    assert call_key("get_offers", {"a": 1}) != call_key("drain_instance", {"a": 1})


def test_stored_history_is_trimmed_in_whole_units() -> None:
    turns = [observation("r1"), *tool_exchange("r1", 1), *tool_exchange("r1", 2), answer("r1")]
    trimmed = trim_history(turns, 4)
    assert trimmed == turns[3:]
    assert [len(u) for u in units(turns)] == [1, 2, 2, 1]
