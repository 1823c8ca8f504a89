"""Where operator directives live: Redis, numbered, each kept as its contract JSON until a week after it ended.

Three keys under the decider's prefix: a counter that numbers them, a hash of number → directive, and a sorted set
of the active ones scored by their expiry (so the cap on active directives is counted without reading them all).
A directive that ended (expired or revoked) stays listed for RETENTION_S (the newest MAX_ENDED_KEPT of them), so
`fleetpilot directives` still shows what bound the fleet this morning, then is removed on the next read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pydantic
from pydantic import TypeAdapter
from redis.asyncio import Redis
from redis.exceptions import RedisError

from shared.contract.directives import MAX_ACTIVE_DIRECTIVES, Directive

# how long an ended directive is still listed: a week answers "what was in force last weekend"
RETENTION_S = 7 * 24 * 3600.0
# and how many at most (the newest): a listing is one NATS message, 517 kB for 564 with every string at its limit
MAX_ENDED_KEPT = 500

_DIRECTIVE: TypeAdapter[Directive] = TypeAdapter(Directive)

# KEYS: the hash, the active set. ARGV: now, the cap, number, JSON, expiry. 1 when stored, 0 at the cap.
# One script, so two replicas adding at once cannot both take the last place.
_ADD_UNDER_CAP = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
return 1
"""
# KEYS: the hash, the active set. ARGV: number, JSON. Written only if the directive is still stored.
_REVOKE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""


class DirectiveStoreUnavailable(Exception):
    """Redis could not be read or written: what is in force is unknown (never "none")."""


@dataclass(frozen=True)
class StoredDirectives:
    """Every directive still kept, newest first, and the stored ones that could not be read (number: why)."""

    directives: tuple[Directive, ...]
    unreadable: dict[str, str] = field(default_factory=dict)  # number → why it could not be read

    def problem(self) -> str | None:
        if not self.unreadable:
            return None
        return "unreadable: " + "; ".join(f"#{n}: {why}" for n, why in sorted(self.unreadable.items()))[:1000]


@dataclass(frozen=True)
class Revoked:
    directive: Directive | None  # as stored after the revoke (or as it was, when nothing changed)
    refusal: str | None = None  # why nothing was revoked


def ended_at(directive: Directive) -> datetime:
    return directive.revoked_at if directive.revoked_at is not None else directive.expires_at


def kept(directive: Directive, now: datetime) -> bool:
    """Still listed: active, or ended less than RETENTION_S ago."""
    return now < ended_at(directive) + timedelta(seconds=RETENTION_S)


def active(directives: Iterable[Directive], now: datetime) -> tuple[Directive, ...]:
    """The directives in force at `now`, oldest first (the order they were given in)."""
    return tuple(sorted((d for d in directives if d.active(now)), key=lambda d: d.directive_id))


def status_of(directive: Directive, now: datetime) -> str:
    if directive.revoked_at is not None:
        return "revoked"
    return "active" if directive.active(now) else "expired"


def restamped(directive: Directive, directive_id: int, set_at: datetime) -> Directive:
    """The directive as the decider stores it: its number and the moment it was received, never revoked; checked
    again (a directive whose expiry has passed by now is refused here). Raises pydantic.ValidationError."""
    fields = directive.model_dump()
    fields.update(directive_id=directive_id, set_at=set_at, revoked_at=None, revoked_by=None)
    return _DIRECTIVE.validate_python(fields)


def _ts(moment: datetime) -> float:
    return moment.timestamp()


class DirectiveStore:
    def __init__(self, redis: Redis, namespace: str) -> None:
        self.redis = redis
        prefix = f"{namespace}:decider:directives"
        self.sequence_key = f"{prefix}:sequence"
        self.directives_key = prefix
        self.active_key = f"{prefix}:active"

    @property
    def keys(self) -> list[str]:
        return [self.sequence_key, self.directives_key, self.active_key]

    async def read(self, now: datetime) -> StoredDirectives:
        """Every directive kept, newest first; those past their retention are removed as they are found."""
        try:
            rows = await self.redis.hgetall(self.directives_key)
        except (RedisError, OSError) as error:
            raise DirectiveStoreUnavailable(f"redis: {type(error).__name__}: {error}") from error
        found: list[Directive] = []
        unreadable: dict[str, str] = {}
        forgotten: list[str] = []
        for number, raw in rows.items():
            try:
                directive = _DIRECTIVE.validate_json(raw)
            except (pydantic.ValidationError, ValueError) as error:
                unreadable[_text(number)] = f"{type(error).__name__}: {str(error).splitlines()[0]}"[:300]
                continue
            if kept(directive, now):
                found.append(directive)
            else:
                forgotten.append(_text(number))
        found.sort(key=lambda d: d.directive_id, reverse=True)
        ended = [d for d in found if d.revoked_at is not None or not d.active(now)]
        for directive in ended[MAX_ENDED_KEPT:]:
            forgotten.append(str(directive.directive_id))
            found.remove(directive)
        if forgotten:
            await self._forget(forgotten)
        return StoredDirectives(tuple(found), unreadable)

    async def add(self, directive: Directive, now: datetime) -> Directive | str:
        """The directive stored under its new number, or why it was not (the cap on active directives).

        Raises pydantic.ValidationError when the directive, received now, is no longer valid (expired already)."""
        restamped(directive, 1, now)  # refused before a number is spent on it
        try:
            number = int(await self.redis.incr(self.sequence_key))
            stored = restamped(directive, number, now)
            added = await self.redis.eval(
                _ADD_UNDER_CAP,
                2,
                self.directives_key,
                self.active_key,
                _ts(now),
                MAX_ACTIVE_DIRECTIVES,
                number,
                stored.model_dump_json(),
                _ts(stored.expires_at),
            )
        except (RedisError, OSError) as error:
            raise DirectiveStoreUnavailable(f"redis: {type(error).__name__}: {error}") from error
        if not int(added):
            return (
                f"{MAX_ACTIVE_DIRECTIVES} directives are active already, the most there may be: revoke one first "
                "(fleetpilot directives revoke N)"
            )
        return stored

    async def revoke(self, directive_id: int, by: str, now: datetime) -> Revoked:
        try:
            raw = await self.redis.hget(self.directives_key, str(directive_id))
        except (RedisError, OSError) as error:
            raise DirectiveStoreUnavailable(f"redis: {type(error).__name__}: {error}") from error
        if raw is None:
            return Revoked(None, f"no directive #{directive_id} (or it ended over {RETENTION_S / 86400:.0f} days ago)")
        try:
            directive = _DIRECTIVE.validate_json(raw)
        except (pydantic.ValidationError, ValueError) as error:
            return Revoked(None, f"directive #{directive_id} is unreadable ({type(error).__name__}); not changed")
        if directive.revoked_at is not None:
            return Revoked(directive, f"#{directive_id} was revoked already, by {directive.revoked_by}")
        if not directive.active(now):
            return Revoked(directive, f"#{directive_id} expired at {directive.expires_at:%Y-%m-%d %H:%M} UTC already")
        revoked = directive.model_copy(update={"revoked_at": now, "revoked_by": by})
        try:
            written = await self.redis.eval(
                _REVOKE, 2, self.directives_key, self.active_key, directive_id, revoked.model_dump_json()
            )
        except (RedisError, OSError) as error:
            raise DirectiveStoreUnavailable(f"redis: {type(error).__name__}: {error}") from error
        if not int(written):
            return Revoked(None, f"no directive #{directive_id} (removed meanwhile)")
        return Revoked(revoked)

    async def _forget(self, numbers: Sequence[str]) -> None:
        try:
            await self.redis.hdel(self.directives_key, *numbers)
            await self.redis.zrem(self.active_key, *numbers)
        except (RedisError, OSError) as error:
            raise DirectiveStoreUnavailable(f"redis: {type(error).__name__}: {error}") from error


@dataclass(frozen=True)
class InForce:
    """What a run enforces: the active directives, and in words why they may not be all of them."""

    directives: tuple[Directive, ...]
    problem: str | None = None


@dataclass
class DirectiveMemory:
    """The store, and what it last said: a run that cannot read it enforces the directives it read last (what was
    in force a run ago binds still), never none, and says so."""

    store: DirectiveStore
    last: StoredDirectives | None = None
    last_read_at: datetime | None = None

    async def in_force(self, now: datetime) -> InForce:
        try:
            stored = await self.store.read(now)
        except DirectiveStoreUnavailable as error:
            return self._from_memory(now, f"directives could not be read ({error})")
        remembered = {str(d.directive_id): d for d in self.last.directives} if self.last else {}
        # an entry garbled in Redis keeps the version read before, so a directive is never lost to one bad write
        carried = [remembered[number] for number in stored.unreadable if number in remembered]
        self.last = StoredDirectives((*stored.directives, *carried), stored.unreadable)
        self.last_read_at = now
        problem = stored.problem()
        if problem and carried:
            problem += f"; enforcing {', '.join(f'#{d.directive_id}' for d in carried)} as last read"
        return InForce(active(self.last.directives, now), problem)

    def _from_memory(self, now: datetime, why: str) -> InForce:
        if self.last is None or self.last_read_at is None:
            return InForce((), f"{why}; none read since this decider started: the directives in force are unknown")
        last = active(self.last.directives, now)
        return InForce(last, f"{why}; enforcing the {len(last)} read at {self.last_read_at:%H:%M:%S} UTC")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
