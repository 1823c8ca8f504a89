"""Where demand's window state lives between restarts: Redis.

Why Redis and not a JetStream KV bucket: a checkpoint is one MULTI/EXEC that replaces the window state and
appends the newly seen event ids to a capped list (RPUSH + LTRIM), so the state and the de-duplication
memory can never disagree, and each checkpoint writes only the new ids instead of the whole memory. A KV
bucket has neither the transaction nor the list, and its values are capped by the server's max payload
(1 MB by default), which the id memory exceeds. It also keeps state off the broker that carries the events.
"""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis


class DemandStore:
    def __init__(self, redis_url: str, namespace: str, seen_capacity: int) -> None:
        self.redis: Redis = Redis.from_url(redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self.state_key = f"fleetpilot:{namespace}:demand:state"
        self.seen_key = f"fleetpilot:{namespace}:demand:seen_event_ids"
        self.seen_capacity = seen_capacity

    async def load(self) -> tuple[dict[str, Any] | None, list[str]]:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(self.state_key)
            pipe.lrange(self.seen_key, 0, -1)
            raw_state, raw_ids = await pipe.execute()
        state = json.loads(raw_state) if raw_state else None
        return state, [i.decode() for i in raw_ids]

    async def save(self, state: dict[str, Any], new_seen_ids: list[str]) -> None:
        payload = json.dumps(state, separators=(",", ":"))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.state_key, payload)
            if new_seen_ids:
                pipe.rpush(self.seen_key, *new_seen_ids)
                pipe.ltrim(self.seen_key, -self.seen_capacity, -1)
            await pipe.execute()

    async def close(self) -> None:
        await self.redis.aclose()
