"""The bounded memory of processed event ids that fleet and demand de-duplicate with."""

from __future__ import annotations

from services.demand.records import JournalledSeenIds
from shared.seen_ids import SeenIds


def test_an_id_is_new_once_and_the_oldest_is_forgotten_past_the_capacity() -> None:
    seen = SeenIds(capacity=2)
    assert [seen.first_time(i) for i in ("a", "b", "a")] == [True, True, False]
    assert seen.first_time("c") and len(seen) == 2
    assert seen.first_time("a"), "a was the oldest, forgotten when c came"
    assert not seen.first_time("c")


def test_loaded_ids_count_as_seen_within_the_capacity() -> None:
    seen = SeenIds(capacity=2)
    seen.load(["x", "y", "z"])
    assert (seen.first_time("x"), seen.first_time("z")) == (True, False)


def test_demand_journals_only_ids_new_since_the_last_take() -> None:
    seen = JournalledSeenIds(capacity=10)
    seen.load(["old"])
    for event_id in ("old", "n1", "n1", "n2"):
        seen.first_time(event_id)
    assert seen.take_journal() == ["n1", "n2"]
    assert seen.take_journal() == []
