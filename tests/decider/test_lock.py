"""Single flight on a real redis-server: one holder, fencing tokens, expiry after a crash, Redis down."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from services.decider.guardrails import SentLaunch
from services.decider.lock import LockUnavailable, RedisSingleFlight
from sim.infra import RedisServer

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
async def pair(redis_server: RedisServer):  # type: ignore[no-untyped-def]
    a = RedisSingleFlight(redis_server.url, "fpt", "replica-a", ttl_s=0.3)
    b = RedisSingleFlight(redis_server.url, "fpt", "replica-b", ttl_s=0.3)
    yield a, b
    await a.close()
    await b.close()


async def test_one_holder_at_a_time_with_increasing_tokens(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    lease_a = await a.acquire()
    assert lease_a is not None and lease_a.token == 1
    assert await b.acquire() is None
    assert await a.holder() == "replica-a:1"
    await a.release(lease_a)
    lease_b = await b.acquire()
    assert lease_b is not None and lease_b.token == 2
    await a.release(lease_a)  # releasing someone else's lock does nothing
    assert await b.holds(lease_b)


async def test_one_process_keeps_its_token_from_run_to_run_until_another_holds_the_lock(pair) -> None:  # type: ignore[no-untyped-def]
    # a run's commands may still be queued when the next run publishes: the same holder must not fence itself out
    a, b = pair
    first = await a.acquire()
    assert first is not None
    await a.release(first)
    second = await a.acquire()
    assert second is not None and second.token == first.token
    await a.release(second)
    other = await b.acquire()
    assert other is not None and other.token > second.token
    await b.release(other)
    again = await a.acquire()
    assert again is not None and again.token > other.token


async def test_a_restarted_process_with_the_same_replica_name_gets_a_newer_token(redis_server: RedisServer) -> None:
    before = RedisSingleFlight(redis_server.url, "fpt", "replica-a", ttl_s=1)
    after = RedisSingleFlight(redis_server.url, "fpt", "replica-a", ttl_s=1)
    try:
        old = await before.acquire()
        assert old is not None
        await before.release(old)
        new = await after.acquire()
        assert new is not None and new.token > old.token
    finally:
        await before.close()
        await after.close()


async def test_a_crashed_holder_expires_and_cannot_act_afterwards(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    stale = await a.acquire()
    assert stale is not None
    # a "crashes": no renewal; b gets the lock once it expires
    lease_b = None
    for _ in range(100):
        lease_b = await b.acquire()
        if lease_b:
            break
        await asyncio.sleep(0.05)
    assert lease_b is not None and lease_b.token > stale.token
    # the stale holder wakes up: the fence says no, and its fenced writes are refused
    assert not await a.holds(stale)
    assert stale.lost
    assert not await a.record_run(stale, NOW, ["trigger-1"])
    state = await b.shared_state(["trigger-1"], NOW)
    assert state.covered_event_ids == frozenset() and state.last_run_started_at is None


async def test_renewal_keeps_a_long_run_alive(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    lease = await a.acquire()
    assert lease is not None
    for _ in range(6):  # 0.6 s, twice the TTL
        await asyncio.sleep(0.1)
        assert await a.renew(lease)
    assert await b.acquire() is None
    assert await a.holds(lease)


async def test_runs_share_what_they_saw(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    lease = await a.acquire()
    assert lease is not None
    assert await a.record_run(lease, NOW, ["t1", "t2"])
    await a.add_wakeup(lease, NOW + timedelta(minutes=10))
    await a.record_launch(lease, SentLaunch("run-1-0", NOW, 3, 0.8))
    await a.release(lease)
    state = await b.shared_state(["t2", "t3"], NOW)
    assert state.covered_event_ids == frozenset({"t2"})
    assert state.last_run_started_at == NOW
    assert await b.wakeups_after(NOW) == [NOW + timedelta(minutes=10)]
    assert await b.wakeups_after(NOW + timedelta(minutes=11)) == []
    assert await b.recent_launches(NOW + timedelta(minutes=5)) == [SentLaunch("run-1-0", NOW, 3, 0.8)]
    assert await b.recent_launches(NOW + timedelta(minutes=61)) == []


async def test_redis_down_is_an_error_not_a_lock(redis_server: RedisServer) -> None:
    single_flight = RedisSingleFlight(redis_server.url, "fpt", "replica-a", ttl_s=1)
    try:
        redis_server.stop()
        with pytest.raises(LockUnavailable):
            await single_flight.acquire()
        redis_server.start()
        assert await single_flight.acquire() is not None
    finally:
        await single_flight.close()


async def test_a_lease_whose_release_failed_with_redis_away_is_released_once_redis_is_back(
    redis_server: RedisServer,
) -> None:
    # Redis keeps the lock in its append-only file: without this, the process would wait out its 30 s life
    lock = RedisSingleFlight(redis_server.url, "fpt", "replica-a", ttl_s=30.0)
    other = RedisSingleFlight(redis_server.url, "fpt", "replica-b", ttl_s=30.0)
    try:
        lease = await lock.acquire()
        assert lease is not None
        redis_server.kill()
        with pytest.raises(LockUnavailable):
            await lock.release(lease)
        redis_server.start()
        assert await other.acquire() is None  # the lock came back with Redis
        again = await lock.acquire()
        assert again is not None and again.token == lease.token
    finally:
        await lock.close()
        await other.close()
