"""The directive store on a real redis-server: numbering, the cap on active ones, revoke, expiry and retention, and
what a run enforces when the store cannot be read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pydantic
import pytest
from redis.asyncio import Redis

from services.decider.directive_store import (
    MAX_ENDED_KEPT,
    RETENTION_S,
    DirectiveMemory,
    DirectiveStore,
    DirectiveStoreUnavailable,
    active,
    status_of,
)
from shared.contract.directives import MAX_ACTIVE_DIRECTIVES, CapInstances, Directive, ExcludeGpuModel
from sim.infra import RedisServer

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def cap(max_instances: int, *, hours: float = 4.0, at: datetime = NOW) -> CapInstances:
    return CapInstances(
        directive_id=1, set_at=at, set_by="alice", via="cli", expires_at=at + timedelta(hours=hours),
        max_instances=max_instances,
    )  # fmt: skip


def no_model(gpu_model: str, *, hours: float = 4.0) -> ExcludeGpuModel:
    return ExcludeGpuModel(
        directive_id=1, set_at=NOW, set_by="bob", via="agent", expires_at=NOW + timedelta(hours=hours),
        gpu_model=gpu_model, instruction="no more 3090s today",
    )  # fmt: skip


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=1.0)
    yield client
    await client.aclose()


def stored(result: Directive | str) -> Directive:
    assert not isinstance(result, str), result
    return result


async def test_directives_are_numbered_kept_as_given_and_listed_newest_first(redis: Redis) -> None:
    store = DirectiveStore(redis, "fpt")
    later = NOW + timedelta(minutes=5)
    first = stored(await store.add(cap(6), NOW))
    second = stored(await store.add(no_model("RTX 3090"), later))
    assert (first.directive_id, second.directive_id) == (1, 2)
    assert second.set_at == later  # received then, whatever the sender wrote
    assert isinstance(second, ExcludeGpuModel) and second.gpu_model == "RTX 3090" and second.via == "agent"
    assert second.instruction == "no more 3090s today"

    # another process (a restarted decider) reads the same
    listing = await DirectiveStore(redis, "fpt").read(later)
    assert [d.directive_id for d in listing.directives] == [2, 1]
    assert listing.directives[1] == first and listing.unreadable == {}
    assert DirectiveStore(redis, "other").keys != store.keys
    assert (await DirectiveStore(redis, "other").read(later)).directives == ()


async def test_a_directive_expires_then_is_forgotten_a_retention_later(redis: Redis) -> None:
    store = DirectiveStore(redis, "fpt")
    short = stored(await store.add(cap(3, hours=1), NOW))
    long = stored(await store.add(cap(5, hours=48), NOW))
    in_two_hours = NOW + timedelta(hours=2)
    listing = (await store.read(in_two_hours)).directives
    assert [status_of(d, in_two_hours) for d in listing] == ["active", "expired"]
    assert active(listing, in_two_hours) == (long,)

    beyond = short.expires_at + timedelta(seconds=RETENTION_S + 1)
    # the long one ended 47 h after the short one: still listed
    assert [d.directive_id for d in (await store.read(beyond)).directives] == [long.directive_id]
    assert await redis.hlen(store.directives_key) == 1


async def test_at_most_max_active_directives_and_an_expired_one_frees_its_place(redis: Redis) -> None:
    store = DirectiveStore(redis, "fpt")
    stored(await store.add(cap(1, hours=1), NOW))
    for i in range(MAX_ACTIVE_DIRECTIVES - 1):
        stored(await store.add(cap(2 + i % 5), NOW))
    refusal = await store.add(cap(4), NOW)
    assert isinstance(refusal, str) and f"{MAX_ACTIVE_DIRECTIVES} directives are active" in refusal
    # an hour later the first has expired: one place again
    later = NOW + timedelta(hours=1, seconds=1)
    stored(await store.add(cap(4, at=later), later))
    assert isinstance(await store.add(cap(4, at=later), later), str)


async def test_revoke_stamps_who_and_when_once_and_frees_the_place(redis: Redis) -> None:
    store = DirectiveStore(redis, "fpt")
    directive = stored(await store.add(cap(6), NOW))
    at = NOW + timedelta(minutes=30)
    revoked = await store.revoke(directive.directive_id, "carol", at)
    assert revoked.refusal is None and revoked.directive is not None
    assert (revoked.directive.revoked_at, revoked.directive.revoked_by) == (at, "carol")
    [listed] = (await store.read(at)).directives
    assert status_of(listed, at) == "revoked" and not listed.active(at)
    assert await redis.zcard(store.active_key) == 0

    again = await store.revoke(directive.directive_id, "dave", at)
    assert again.refusal == "#1 was revoked already, by carol"
    missing = await store.revoke(99, "dave", at)
    assert missing.directive is None and missing.refusal is not None and "no directive #99" in missing.refusal


async def test_an_expired_directive_cannot_be_revoked_and_one_given_expired_is_not_stored(redis: Redis) -> None:
    store = DirectiveStore(redis, "fpt")
    directive = stored(await store.add(cap(6, hours=1), NOW))
    refused = await store.revoke(directive.directive_id, "carol", NOW + timedelta(hours=2))
    assert refused.refusal is not None and "expired at" in refused.refusal
    with pytest.raises(pydantic.ValidationError, match="expires_at must be after set_at"):
        await store.add(cap(6, hours=1), NOW + timedelta(hours=2))
    assert await redis.get(store.sequence_key) == "1"  # no number spent on the refused one


async def test_a_run_enforces_what_it_read_last_when_the_store_is_garbled_or_gone(redis_server: RedisServer) -> None:
    client = Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=0.5, socket_connect_timeout=0.5)
    store = DirectiveStore(client, "fpt")
    memory = DirectiveMemory(store)
    first = stored(await store.add(cap(6), NOW))
    second = stored(await store.add(no_model("RTX 3090"), NOW))
    read = await memory.in_force(NOW)
    assert read.directives == (first, second) and read.problem is None

    # one entry garbled: the others as stored, that one as read before, and the run is told
    await client.hset(store.directives_key, "2", "{not json")
    garbled = await memory.in_force(NOW)
    assert garbled.directives == (first, second)
    assert garbled.problem is not None and "#2" in garbled.problem and "enforcing #2 as last read" in garbled.problem
    assert (await store.read(NOW)).problem() is not None

    # Redis gone: the directives last read, never none, and said so
    redis_server.stop()
    try:
        with pytest.raises(DirectiveStoreUnavailable):
            await store.read(NOW)
        gone = await memory.in_force(NOW + timedelta(minutes=1))
        assert gone.directives == (first, second)
        assert (
            gone.problem is not None
            and "could not be read" in gone.problem
            and "enforcing the 2 read at 09:00" in (gone.problem)
        )
        # past the expiry of what was read, what was read has expired too
        assert (await memory.in_force(NOW + timedelta(hours=5))).directives == ()
        fresh = await DirectiveMemory(store).in_force(NOW)
        assert fresh.directives == () and fresh.problem is not None and "unknown" in fresh.problem
    finally:
        await client.aclose()


async def test_only_the_newest_ended_directives_are_kept_and_never_an_active_one_is_dropped(redis: Redis) -> None:
    store = DirectiveStore(redis, "fpt")
    keep = stored(await store.add(cap(2, hours=48), NOW))
    for _ in range(MAX_ENDED_KEPT + 3):
        directive = stored(await store.add(cap(3), NOW))
        await store.revoke(directive.directive_id, "carol", NOW)
    listing = (await store.read(NOW)).directives
    assert len(listing) == MAX_ENDED_KEPT + 1 and keep in listing
    assert min(d.directive_id for d in listing if d != keep) == 2 + 3  # the three oldest revoked ones are gone
    assert await redis.hlen(store.directives_key) == MAX_ENDED_KEPT + 1
