"""The bounded memories of processed events that fleet and demand de-duplicate with."""

from __future__ import annotations

from datetime import UTC, datetime

from services.demand.records import JournalledSeenIds
from shared.seen_ids import ResentCompletions, SeenIds


def test_an_id_is_new_once_and_the_oldest_are_forgotten_past_twice_the_capacity() -> None:
    seen = SeenIds(capacity=2)
    assert [seen.first_time(i) for i in ("a", "b", "a")] == [True, True, False]
    assert seen.first_time("c") and seen.first_time("d") and len(seen) == 4, "up to twice the capacity is kept"
    assert not seen.first_time("a")
    assert seen.first_time("e") and len(seen) == 2, "past twice the capacity, the oldest are dropped down to it"
    assert seen.first_time("a") and seen.first_time("b"), "a and b were the oldest, forgotten when e came"
    assert not seen.first_time("d") and not seen.first_time("e"), "the last `capacity` ids are always remembered"


def test_loaded_ids_count_as_seen_within_the_capacity() -> None:
    seen = SeenIds(capacity=1)
    seen.load(["x", "y", "z"])
    assert (seen.first_time("x"), seen.first_time("z")) == (True, False)


def test_demand_journals_only_ids_new_since_the_last_take() -> None:
    seen = JournalledSeenIds(capacity=10)
    seen.load(["old"])
    for event_id in ("old", "n1", "n1", "n2"):
        seen.first_time(event_id)
    assert seen.take_journal() == ["n1", "n2"]
    assert seen.take_journal() == []


def test_a_completion_is_a_repeat_only_when_everything_a_resend_keeps_is_the_same() -> None:
    completions = ResentCompletions(capacity=10)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert completions.first_report("prove", "task-1", at, "w1", 7)
    assert not completions.first_report("prove", "task-1", at, "w1", 7)
    later = datetime(2026, 1, 2, tzinfo=UTC)
    assert completions.first_report("prove", "task-1", later, "w1", 7), "a task id numbered anew, later"
    assert completions.first_report("prove", "task-1", at, "w2", 7)
