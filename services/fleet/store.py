"""Where fleet's instances live between restarts: Redis, one hash field per instance.

Why Redis and not a JetStream KV bucket: a save is one MULTI/EXEC that writes just the instances that
changed (HSET), forgets purged ones (HDEL) and replaces the queue/silence bookkeeping, so the instances and
that bookkeeping are never half-written; the instance id is the field, so a rebuild cannot hold an instance
twice. A KV bucket would need one revision-checked put per instance with no transaction across them, and it
would put state on the broker whose outage is one of the faults this state must survive.
"""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from shared.state_version import found_version, marker, restore_plan, say_rebuild

# 2: the version marker is written; the records and the bookkeeping are what version 1 (no marker) saved
STATE_VERSION = 2
MIGRATES_FROM = frozenset({1})


class FleetStore:
    def __init__(self, redis_url: str, namespace: str) -> None:
        self.redis: Redis = Redis.from_url(redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self.instances_key = f"fleetpilot:{namespace}:fleet:instances"
        self.meta_key = f"fleetpilot:{namespace}:fleet:meta"
        self.version_key = f"fleetpilot:{namespace}:fleet:version"

    async def load(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The saved instances and bookkeeping, migrated to this version; nothing when the saved version is
        unknown here (that state is dropped: fleet rebuilds from the provisioner's observations)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(self.version_key)
            pipe.hvals(self.instances_key)
            pipe.get(self.meta_key)
            raw_version, raw_instances, raw_meta = await pipe.execute()
        version = found_version(raw_version, "fleet")
        if restore_plan(version, STATE_VERSION, MIGRATES_FROM) == "rebuild":
            say_rebuild("fleet", version, STATE_VERSION)
            await self.redis.delete(self.instances_key, self.meta_key, self.version_key)
            return [], None
        # version 1 → 2 changes no record: the next save writes the marker
        return [json.loads(raw) for raw in raw_instances], json.loads(raw_meta) if raw_meta else None

    async def save(self, records: list[dict[str, Any]], deleted: list[int], meta: dict[str, Any]) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            if records:
                pipe.hset(
                    self.instances_key,
                    mapping={str(r["instance_id"]): json.dumps(r, separators=(",", ":")) for r in records},
                )
            if deleted:
                pipe.hdel(self.instances_key, *[str(i) for i in deleted])
            pipe.set(self.meta_key, json.dumps(meta, separators=(",", ":")))
            pipe.set(self.version_key, marker("fleet", STATE_VERSION))
            await pipe.execute()

    async def close(self) -> None:
        await self.redis.aclose()
