"""demand's checkpoint on a real redis-server: a checkpoint whose answer was lost is not journalled twice."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.demand.config import DemandSettings
from services.demand.core import DemandCore
from services.demand.saved import saved_of
from services.demand.store import DemandStore
from sim.infra import RedisServer

CAPACITY = 2500
STATE = saved_of(DemandCore(DemandSettings()))


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[DemandStore]:
    opened = DemandStore(redis_server.url, "fpt", seen_capacity=CAPACITY)
    yield opened
    await opened.close()


async def journal(store: DemandStore) -> list[str]:
    return [raw.decode() for raw in await store.redis.lrange(store.seen_key, 0, -1)]


async def test_a_checkpoint_redis_applied_before_its_answer_was_lost_is_not_appended_again(
    store: DemandStore,
) -> None:
    await store.save(STATE, ["e1", "e2"], "first")  # applied; say its answer never came back
    skipped = await store.save(STATE, ["e1", "e2", "e3"], "second", {"first": 2})
    assert skipped == 2 and await journal(store) == ["e1", "e2", "e3"]
    # an unanswered checkpoint Redis never applied: its ids are appended with the new ones
    skipped = await store.save(STATE, ["e4", "e5"], "fourth", {"third": 1})
    assert skipped == 0 and await journal(store) == ["e1", "e2", "e3", "e4", "e5"]


async def test_two_lost_answers_in_a_row_skip_what_the_applied_one_carried(store: DemandStore) -> None:
    # "a" failed before Redis (nothing applied), "b" carried a's ids and its own and was applied, unanswered
    await store.save(STATE, ["e1", "e2", "e3"], "b")
    skipped = await store.save(STATE, ["e1", "e2", "e3", "e4"], "c", {"a": 2, "b": 3})
    assert skipped == 3 and await journal(store) == ["e1", "e2", "e3", "e4"]


async def test_a_large_checkpoint_is_appended_whole_and_trimmed_to_the_capacity(store: DemandStore) -> None:
    ids = [f"e{i}" for i in range(3000)]  # more than one RPUSH's worth inside the script
    await store.save(STATE, ids, "big")
    assert await journal(store) == ids[-CAPACITY:]
