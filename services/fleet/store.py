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

from services.fleet.saved import (
    SavedMeta,
    instance_from_positional,
    meta_from_positional,
    restored_instance,
    saved_instance,
)
from shared.redis_client import connect_redis
from shared.state_version import found_version, marker, restore_plan, say_rebuild

# 2: the version marker is written; the records and the bookkeeping are what version 1 (no marker) saved.
# 3: every field named (services/fleet/saved.py); 1 and 2 saved positional lists, migrated on load
STATE_VERSION = 3
MIGRATES_FROM = frozenset({1, 2})


class FleetStore:
    def __init__(self, redis_url: str, namespace: str) -> None:
        self.redis: Redis = connect_redis(redis_url)
        self.instances_key = f"fleetpilot:{namespace}:fleet:instances"
        self.meta_key = f"fleetpilot:{namespace}:fleet:meta"
        self.version_key = f"fleetpilot:{namespace}:fleet:version"

    async def load(self) -> tuple[list[dict[str, Any]], SavedMeta | None]:
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
        records = [json.loads(raw) for raw in raw_instances]
        if version in MIGRATES_FROM:
            return await self._migrated(records, json.loads(raw_meta) if raw_meta else None)
        return records, SavedMeta.model_validate_json(raw_meta) if raw_meta else None

    async def _migrated(
        self, records: list[dict[str, Any]], meta: dict[str, Any] | None
    ) -> tuple[list[dict[str, Any]], SavedMeta | None]:
        """Versions 1 and 2, named and validated, then written back whole as version 3 in one transaction: a
        save writes only the records that changed, so a record left positional would be read as version 3."""
        migrated = [saved_instance(restored_instance(instance_from_positional(record))) for record in records]
        saved_meta = meta_from_positional(meta) if meta is not None else None
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.instances_key)
            if migrated:
                pipe.hset(self.instances_key, mapping={str(r["instance_id"]): json.dumps(r) for r in migrated})
            if saved_meta is not None:
                pipe.set(self.meta_key, saved_meta.model_dump_json())
            pipe.set(self.version_key, marker("fleet", STATE_VERSION))
            await pipe.execute()
        return migrated, saved_meta

    async def save(self, records: list[dict[str, Any]], deleted: list[int], meta: SavedMeta) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            if records:
                pipe.hset(
                    self.instances_key,
                    mapping={str(r["instance_id"]): json.dumps(r, separators=(",", ":")) for r in records},
                )
            if deleted:
                pipe.hdel(self.instances_key, *[str(i) for i in deleted])
            pipe.set(self.meta_key, meta.model_dump_json())
            pipe.set(self.version_key, marker("fleet", STATE_VERSION))
            await pipe.execute()

    async def close(self) -> None:
        await self.redis.aclose()
