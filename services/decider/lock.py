"""Single flight across decider replicas: a Redis lock with expiry and a fencing token, and the run state they share.

The lock value is `<owner>:<token>`, the token an INCR counter that moves only when the holder changes: every new
holder has a larger token than the last, while one process keeps its token from run to run. (A token per run made
the provisioner refuse the commands of a run still queued behind the next run's: in a loaded demo, 207 destroys of
failed machines were refused as stale and the failed machines stayed billed.)
Before each command is published the holder checks, atomically in Redis, that the value is still its own: a
holder that stalled past the expiry finds a newer value and does not act. The residual gap (between that check
and the publish) is closed by the token each command carries: the provisioner refuses a command whose token is
older than the newest it has seen. The token is in every DecisionRecord too, for the audit.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from redis.exceptions import RedisError

from services.decider.guardrails import RATE_WINDOW_S, REMOVAL_IN_FLIGHT_S, SentLaunch, SentRemoval
from shared.redis_client import connect_redis

# KEYS: lock, fence counter, fence holder. ARGV: owner, ttl ms, process identity.
# Returns the token (new when another process held the fence last), or 0 when someone holds the lock.
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local token = tonumber(redis.call('GET', KEYS[2]) or '0')
if token == 0 or redis.call('GET', KEYS[3]) ~= ARGV[3] then
  token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[3], ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return token
"""
# KEYS: lock. ARGV: value, ttl ms. 1 when still ours (and extended), else 0.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_HOLDS = "if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end return 0"
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
# KEYS: lock, sorted set, [last-run key]. ARGV: value, score, member..., writes only while the lock is ours.
_FENCED_ZADD = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 3, #ARGV do redis.call('ZADD', KEYS[2], ARGV[2], ARGV[i]) end
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[2]) end
return 1
"""

COVERED_RETENTION_S = 3600.0  # trigger ids older than the trigger stream's redelivery horizon need no memory
LOCK_REDIS_TIMEOUT_S = 2.0


class LockUnavailable(Exception):
    """Redis cannot be reached: no replica can prove it is the only one, so none acts."""


@dataclass
class Lease:
    owner: str
    token: int
    ttl_s: float
    lost: bool = False

    @property
    def value(self) -> str:
        return f"{self.owner}:{self.token}"


@dataclass(frozen=True)
class SharedRunState:
    """What the replicas tell each other through Redis: the last run's start and the triggers it saw."""

    last_run_started_at: datetime | None
    covered_event_ids: frozenset[str]


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def _dt(seconds: float | bytes | str) -> datetime:
    return datetime.fromtimestamp(float(seconds), UTC)


class RedisSingleFlight:
    def __init__(self, redis_url: str, namespace: str, owner: str, ttl_s: float) -> None:
        self.redis = connect_redis(redis_url, LOCK_REDIS_TIMEOUT_S, decode_responses=True)
        self.owner = owner
        # the fence follows the process, not the replica name: a restarted replica gets a newer token
        self.process_identity = f"{owner}/{uuid.uuid4().hex}"
        self.ttl_s = ttl_s
        prefix = f"{namespace}:decider"
        self.lock_key = f"{prefix}:lock"
        self.fence_key = f"{prefix}:fence"
        self.fence_holder_key = f"{prefix}:fence_holder"
        self.last_run_key = f"{prefix}:last_run_started"
        self.covered_key = f"{prefix}:covered"
        self.wakeups_key = f"{prefix}:wakeups"
        self.launches_key = f"{prefix}:launches"
        self.removals_key = f"{prefix}:removals"
        # a lease whose release failed with Redis away: Redis's append-only file brings the lock back with the
        # rest of its life, so this process releases it first once Redis answers again, not waiting it out
        self._unreleased: str | None = None

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl_s * 1000))

    async def _call(self, script: str, keys: list[str], args: list[str | int | float]) -> int:
        try:
            return int(await self.redis.eval(script, len(keys), *keys, *args))
        except (RedisError, OSError) as error:
            raise LockUnavailable(f"redis: {type(error).__name__}: {error}") from error

    async def acquire(self) -> Lease | None:
        """A lease (its token newer than any other process's), or None while another replica holds the lock."""
        if self._unreleased is not None:
            await self._call(_RELEASE, [self.lock_key], [self._unreleased])
            self._unreleased = None
        token = await self._call(
            _ACQUIRE,
            [self.lock_key, self.fence_key, self.fence_holder_key],
            [self.owner, self._ttl_ms, self.process_identity],
        )
        return Lease(self.owner, token, self.ttl_s) if token else None

    async def renew(self, lease: Lease) -> bool:
        held = await self._call(_RENEW, [self.lock_key], [lease.value, self._ttl_ms]) == 1
        lease.lost = lease.lost or not held
        return held

    async def holds(self, lease: Lease) -> bool:
        """The fence: checked right before every publish of a command."""
        held = not lease.lost and await self._call(_HOLDS, [self.lock_key], [lease.value]) == 1
        lease.lost = not held
        return held

    async def release(self, lease: Lease) -> None:
        try:
            await self._call(_RELEASE, [self.lock_key], [lease.value])
        except LockUnavailable:
            self._unreleased = lease.value
            raise

    async def holder(self) -> str | None:
        try:
            value = await self.redis.get(self.lock_key)
        except (RedisError, OSError) as error:
            raise LockUnavailable(str(error)) from error
        return str(value) if value else None

    async def shared_state(self, event_ids: Iterable[str], now: datetime) -> SharedRunState:
        ids = sorted(set(event_ids))
        try:
            last = await self.redis.get(self.last_run_key)
            scores = await self.redis.zmscore(self.covered_key, ids) if ids else []
        except (RedisError, OSError) as error:
            raise LockUnavailable(str(error)) from error
        covered = frozenset(i for i, score in zip(ids, scores, strict=True) if score is not None)
        return SharedRunState(_dt(last) if last else None, covered)

    async def record_run(self, lease: Lease, started_at: datetime, event_ids: Iterable[str]) -> bool:
        """Tell the other replicas a run that started then has finished and seen these triggers.

        Written at the end, under the lock: a run that crashed midway covers nothing, so the replica that takes
        the lock after it expires runs those triggers again.
        """
        ids = sorted(set(event_ids)) or ["-"]
        ok = await self._call(
            _FENCED_ZADD, [self.lock_key, self.covered_key, self.last_run_key], [lease.value, _ts(started_at), *ids]
        )
        try:
            await self.redis.zremrangebyscore(self.covered_key, "-inf", _ts(started_at) - COVERED_RETENTION_S)
        except (RedisError, OSError) as error:
            raise LockUnavailable(str(error)) from error
        return ok == 1

    async def add_wakeup(self, lease: Lease, at: datetime) -> None:
        await self._call(_FENCED_ZADD, [self.lock_key, self.wakeups_key], [lease.value, _ts(at), at.isoformat()])

    async def wakeups_after(self, moment: datetime) -> list[datetime]:
        """Wake-ups any replica's run asked for, still in the future (a replica that dies does not lose them)."""
        try:
            await self.redis.zremrangebyscore(self.wakeups_key, "-inf", _ts(moment))
            rows = cast(list[tuple[str, float]], await self.redis.zrange(self.wakeups_key, 0, -1, withscores=True))
            return [_dt(score) for _, score in rows]
        except (RedisError, OSError) as error:
            raise LockUnavailable(str(error)) from error

    async def record_launch(self, lease: Lease, launch: SentLaunch) -> None:
        member = json.dumps(
            {
                "key": launch.idempotency_key,
                "count": launch.count,
                "worst_price_usd_per_h": launch.worst_price_usd_per_h,
            }
        )
        await self._call(_FENCED_ZADD, [self.lock_key, self.launches_key], [lease.value, _ts(launch.sent_at), member])

    async def recent_launches(self, now: datetime) -> list[SentLaunch]:
        try:
            await self.redis.zremrangebyscore(self.launches_key, "-inf", _ts(now) - RATE_WINDOW_S)
            rows = cast(list[tuple[str, float]], await self.redis.zrange(self.launches_key, 0, -1, withscores=True))
        except (RedisError, OSError) as error:
            raise LockUnavailable(str(error)) from error
        launches = []
        for member, score in rows:
            fields = json.loads(member)
            launches.append(
                SentLaunch(fields["key"], _dt(score), int(fields["count"]), float(fields["worst_price_usd_per_h"]))
            )
        return launches

    async def record_removal(self, lease: Lease, removal: SentRemoval) -> None:
        member = json.dumps({"key": removal.idempotency_key, "instance_id": removal.instance_id, "verb": removal.verb})
        await self._call(_FENCED_ZADD, [self.lock_key, self.removals_key], [lease.value, _ts(removal.sent_at), member])

    async def recent_removals(self, now: datetime) -> list[SentRemoval]:
        """Stops and destroys any replica sent within REMOVAL_IN_FLIGHT_S (a restart does not forget them)."""
        try:
            await self.redis.zremrangebyscore(self.removals_key, "-inf", _ts(now) - REMOVAL_IN_FLIGHT_S)
            rows = cast(list[tuple[str, float]], await self.redis.zrange(self.removals_key, 0, -1, withscores=True))
        except (RedisError, OSError) as error:
            raise LockUnavailable(str(error)) from error
        removals = []
        for member, score in rows:
            fields = json.loads(member)
            removals.append(SentRemoval(fields["key"], _dt(score), int(fields["instance_id"]), str(fields["verb"])))
        return removals

    async def close(self) -> None:
        await self.redis.aclose()


async def keep_renewed(single_flight: RedisSingleFlight, lease: Lease) -> None:
    """Extend the lease every third of its TTL while the run lasts (an LLM call can take minutes).

    Wall-time sleep on purpose: Redis expires the key in wall time, whatever clock the service runs on.
    """
    while not lease.lost:
        await asyncio.sleep(lease.ttl_s / 3)
        try:
            if not await single_flight.renew(lease):
                return
        except LockUnavailable:
            lease.lost = True
            return
