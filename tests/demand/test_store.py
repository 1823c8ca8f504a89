"""demand's checkpoint on a real redis-server: a checkpoint whose answer was lost is not journalled twice."""

from __future__ import annotations

from services.demand.config import DemandSettings
from services.demand.core import DemandCore
from services.demand.saved import saved_of
from services.demand.store import DemandStore
from sim.infra import RedisServer


async def journal(store: DemandStore) -> list[str]:
    return [raw.decode() for raw in await store.redis.lrange(store.seen_key, 0, -1)]


async def test_a_checkpoint_redis_applied_before_its_answer_was_lost_is_not_appended_again(
    redis_server: RedisServer,
) -> None:
    store = DemandStore(redis_server.url, "fpt", seen_capacity=1000)
    state = saved_of(DemandCore(DemandSettings()))
    try:
        await store.save(state, ["e1", "e2"], "first")  # applied; say its answer never came back
        skipped = await store.save(state, ["e1", "e2", "e3"], "second", {"first": 2})
        assert skipped == 2 and await journal(store) == ["e1", "e2", "e3"]
        # an unanswered checkpoint Redis never applied: its ids are appended with the new ones
        skipped = await store.save(state, ["e4", "e5"], "fourth", {"third": 1})
        assert skipped == 0 and await journal(store) == ["e1", "e2", "e3", "e4", "e5"]
    finally:
        await store.close()


async def test_two_lost_answers_in_a_row_skip_what_the_applied_one_carried(redis_server: RedisServer) -> None:
    store = DemandStore(redis_server.url, "fpt", seen_capacity=1000)
    state = saved_of(DemandCore(DemandSettings()))
    try:
        # "a" failed before Redis (nothing applied), "b" carried a's ids and its own and was applied, unanswered
        await store.save(state, ["e1", "e2", "e3"], "b")
        skipped = await store.save(state, ["e1", "e2", "e3", "e4"], "c", {"a": 2, "b": 3})
        assert skipped == 3 and await journal(store) == ["e1", "e2", "e3", "e4"]
    finally:
        await store.close()


async def test_a_large_checkpoint_is_appended_whole_and_trimmed_to_the_capacity(redis_server: RedisServer) -> None:
    store = DemandStore(redis_server.url, "fpt", seen_capacity=2500)
    state = saved_of(DemandCore(DemandSettings()))
    try:
        ids = [f"e{i}" for i in range(3000)]  # more than one RPUSH's worth inside the script
        await store.save(state, ids, "big")
        assert await journal(store) == ids[-2500:]
    finally:
        await store.close()
