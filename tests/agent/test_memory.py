"""Memories, the plan and the saved state, as plain values: bounded, deduplicated, and robust to garbage."""

from __future__ import annotations

from datetime import timedelta

from services.decider.agent.context import Turn
from services.decider.agent.memory import Anchor, Memory, PlanItem, make_anchor, recent_memories, remember, replace_plan
from services.decider.agent.store import interpret
from tests.agent.builders import NOW


def memory(text: str, minutes: int = 0) -> Memory:
    return Memory(category="fact", text=text, at=NOW + timedelta(minutes=minutes))


def test_memories_are_deduplicated_and_bounded() -> None:
    memories: list[Memory] = []
    for n in range(10):
        memories, is_new = remember(memories, memory(f"fact {n}", n), limit=5)
        assert is_new
    assert [m.text for m in memories] == [f"fact {n}" for n in range(5, 10)]
    memories, is_new = remember(memories, memory("FACT 6.", 11), limit=5)
    assert not is_new
    assert [m.text for m in memories] == ["fact 5", "fact 7", "fact 8", "fact 9", "FACT 6."]
    assert [m.text for m in recent_memories(memories, 2)] == ["FACT 6.", "fact 9"]


def test_an_overlong_plan_drops_completed_then_low_priority_items() -> None:
    items = [
        PlanItem(content="a", status="completed", priority="high"),
        PlanItem(content="b", status="pending", priority="low"),
        PlanItem(content="c", status="in_progress", priority="medium"),
        PlanItem(content="d", status="pending", priority="high"),
    ]
    assert [i.content for i in replace_plan(items, 2)] == ["c", "d"]
    assert replace_plan(items, 10) == items


def test_the_anchor_counts_runs_and_keeps_its_fields_short() -> None:
    first = make_anchor(
        run_id="r1", at=NOW, previous=None, fleet_summary="f" * 5000, demand_summary="d", last_decision="x",
        concerns=[f"c{n}" for n in range(9)],
    )  # fmt: skip
    second = make_anchor(
        run_id="r2", at=NOW, previous=first, fleet_summary="f", demand_summary="d", last_decision="", concerns=[]
    )
    assert (first.runs_total, second.runs_total) == (1, 2)
    assert len(first.fleet_summary) == 400 and len(first.open_concerns) == 5


def test_garbage_in_any_saved_part_is_reported_and_the_rest_is_kept() -> None:
    anchor = make_anchor(
        run_id="r1", at=NOW, previous=None, fleet_summary="f", demand_summary="d", last_decision="", concerns=[]
    )
    plan = '[{"content": "watch", "status": "pending", "priority": "high"}]'
    state = interpret({"session": "not json {", "anchor": anchor.model_dump_json(), "memories": "[1, 2]", "plan": plan})
    assert state.anchor == anchor
    assert state.history == [] and state.memories == []
    assert [p.content for p in state.plan] == ["watch"]
    assert state.problems == ["session unreadable (ValidationError)", "memories unreadable (ValidationError)"]


def test_a_deleted_session_with_an_anchor_left_is_reported_as_missing() -> None:
    anchor = Anchor(last_run_id="r1", last_run_at=NOW, runs_total=1, fleet_summary="f", demand_summary="d")
    assert interpret({"anchor": anchor.model_dump_json()}).problems == ["session missing"]
    session = Turn(role="user", kind="observation", content="x").model_dump_json()
    assert interpret({"session": f"[{session}]"}).problems == ["anchor missing"]
    assert interpret({}).problems == []  # a first run is not a loss
