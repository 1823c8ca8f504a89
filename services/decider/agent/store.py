"""Where the agent's state lives between runs: Redis (an in-memory twin serves the smoke test's dry run).

Four keys, each read on its own, so losing or garbling one never costs the others: the session (earlier runs'
turns), the anchor, the memories, the plan. A fifth marks a run in progress, to catch two runs at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from redis.asyncio import Redis

from services.decider.agent.context import Turn
from services.decider.agent.memory import Anchor, Memory, PlanItem

STATE_VERSION = 1
T = TypeVar("T")

_TURNS = TypeAdapter(list[Turn])
_MEMORIES = TypeAdapter(list[Memory])
_PLAN = TypeAdapter(list[PlanItem])
_ANCHOR = TypeAdapter(Anchor)

# delete the run marker only if it is still ours (a marker that expired and was taken by another run stays)
_RELEASE_IF_OURS = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


@dataclass
class LoadedState:
    history: list[Turn] = field(default_factory=list)
    anchor: Anchor | None = None
    memories: list[Memory] = field(default_factory=list)
    plan: list[PlanItem] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what was missing or unreadable, in words


class AgentStore(Protocol):
    async def load(self) -> LoadedState: ...

    async def save_run(self, history: list[Turn], anchor: Anchor) -> None: ...

    async def save_memories(self, memories: list[Memory]) -> None: ...

    async def save_plan(self, plan: list[PlanItem]) -> None: ...

    async def claim_run(self, run_id: str, ttl_s: int) -> str | None:
        """Mark a run as active. Returns None when claimed, or the id of the run already active."""
        ...

    async def release_run(self, run_id: str) -> None: ...


def _decode(raw: str | bytes | None, adapter: TypeAdapter[T], part: str, problems: list[str]) -> T | None:
    if raw is None:
        return None
    try:
        return adapter.validate_json(raw)
    except (ValidationError, ValueError) as error:
        problems.append(f"{part} unreadable ({type(error).__name__})")
        return None


def interpret(raw: dict[str, str | bytes | None]) -> LoadedState:
    """Pure: the four stored values (None when absent) as a state, listing what was lost."""
    problems: list[str] = []
    history = _decode(raw.get("session"), _TURNS, "session", problems)
    anchor = _decode(raw.get("anchor"), _ANCHOR, "anchor", problems)
    memories = _decode(raw.get("memories"), _MEMORIES, "memories", problems)
    plan = _decode(raw.get("plan"), _PLAN, "plan", problems)
    had_runs = anchor is not None or bool(memories) or bool(plan)
    if raw.get("session") is None and had_runs:
        problems.append("session missing")
    if raw.get("anchor") is None and (raw.get("session") is not None or memories or plan):
        problems.append("anchor missing")
    return LoadedState(history or [], anchor, memories or [], plan or [], problems)


def _dump(model_list: list[Any] | BaseModel) -> str:
    if isinstance(model_list, BaseModel):
        return model_list.model_dump_json()
    return TypeAdapter(list[Any]).dump_json(model_list).decode()


class RedisAgentStore:
    def __init__(self, redis: Redis, namespace: str) -> None:
        self.redis = redis
        self.base = f"fleetpilot:{namespace}:agent"

    def key(self, part: str) -> str:
        return f"{self.base}:{part}"

    @property
    def keys(self) -> list[str]:
        return [self.key(p) for p in ("session", "anchor", "memories", "plan")]

    async def load(self) -> LoadedState:
        values = await self.redis.mget(self.keys)
        return interpret(dict(zip(("session", "anchor", "memories", "plan"), values, strict=True)))

    async def save_run(self, history: list[Turn], anchor: Anchor) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.key("session"), _dump(history))
            pipe.set(self.key("anchor"), _dump(anchor))
            await pipe.execute()

    async def save_memories(self, memories: list[Memory]) -> None:
        await self.redis.set(self.key("memories"), _dump(memories))

    async def save_plan(self, plan: list[PlanItem]) -> None:
        await self.redis.set(self.key("plan"), _dump(plan))

    async def claim_run(self, run_id: str, ttl_s: int) -> str | None:
        if await self.redis.set(self.key("active_run"), run_id, nx=True, ex=ttl_s):
            return None
        other = await self.redis.get(self.key("active_run"))
        if other is None:  # it expired between the two calls: try once more
            return None if await self.redis.set(self.key("active_run"), run_id, nx=True, ex=ttl_s) else "unknown"
        return other.decode() if isinstance(other, bytes) else str(other)

    async def release_run(self, run_id: str) -> None:
        await self.redis.eval(_RELEASE_IF_OURS, 1, self.key("active_run"), run_id)


class InMemoryAgentStore:
    """The same behaviour without Redis, for a dry run that must leave nothing behind."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.active_run: str | None = None

    async def load(self) -> LoadedState:
        return interpret({part: self.values.get(part) for part in ("session", "anchor", "memories", "plan")})

    async def save_run(self, history: list[Turn], anchor: Anchor) -> None:
        self.values["session"] = _dump(history)
        self.values["anchor"] = _dump(anchor)

    async def save_memories(self, memories: list[Memory]) -> None:
        self.values["memories"] = _dump(memories)

    async def save_plan(self, plan: list[PlanItem]) -> None:
        self.values["plan"] = _dump(plan)

    async def claim_run(self, run_id: str, ttl_s: int) -> str | None:
        if self.active_run is not None:
            return self.active_run
        self.active_run = run_id
        return None

    async def release_run(self, run_id: str) -> None:
        if self.active_run == run_id:
            self.active_run = None
