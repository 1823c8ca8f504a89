"""Where demand's window state lives between restarts: Redis.

Why Redis and not a JetStream KV bucket: a checkpoint is one MULTI/EXEC that replaces the window state and
appends the newly seen event ids to a capped list (RPUSH + LTRIM), so the state and the de-duplication
memory can never disagree, and each checkpoint writes only the new ids instead of the whole memory. A KV
bucket has neither the transaction nor the list, and its values are capped by the server's max payload
(1 MB by default), which the id memory exceeds. It also keeps state off the broker that carries the events.
"""

from __future__ import annotations

import json

from redis.asyncio import Redis

from services.demand.saved import SavedDemand, from_positional, producers_keyed
from shared.redis_client import connect_redis
from shared.state_version import found_version, marker, restore_plan, say_rebuild

# 2: the version marker is written; the window state and the id memory are what version 1 (no marker) saved.
# 3: the window state is services/demand/saved.py's model, every field named (1 and 2 were positional lists)
# 4: workers kept by producer, the machine when known (3 kept the job system's worker ids)
STATE_VERSION = 4
MIGRATES_FROM = frozenset({1, 2, 3})


# One checkpoint, atomically: the window state, the version marker, the new ids appended to the capped id memory,
# and the checkpoint's token. KEYS: state, version, seen ids, last checkpoint. ARGV: state, marker, token,
# {token: ids} of earlier checkpoints whose answer was lost, capacity, then the ids (those of the earlier
# checkpoints first). A checkpoint whose EXEC Redis applied just before it was killed looked failed to us; its
# ids came round again in the next one and the memory held them twice (the fault suite's soak, a Redis
# restart). Redis's last token says which earlier checkpoint it holds, and those ids are not appended again.
_SAVE = """
local unanswered = cjson.decode(ARGV[4])
local holds = redis.call('GET', KEYS[4])
local skip = 0
if holds and unanswered[holds] then skip = unanswered[holds] end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[4], ARGV[3])
local first, last = 6 + skip, #ARGV
for i = first, last, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, last)))
end
if last >= first then redis.call('LTRIM', KEYS[3], -tonumber(ARGV[5]), -1) end
return skip
"""


class DemandStore:
    def __init__(self, redis_url: str, namespace: str, seen_capacity: int) -> None:
        self.redis: Redis = connect_redis(redis_url)
        self.state_key = f"fleetpilot:{namespace}:demand:state"
        self.seen_key = f"fleetpilot:{namespace}:demand:seen_event_ids"
        self.version_key = f"fleetpilot:{namespace}:demand:version"
        self.checkpoint_key = f"fleetpilot:{namespace}:demand:checkpoint"
        self.seen_capacity = seen_capacity

    async def load(self) -> tuple[SavedDemand | None, list[str]]:
        """The saved windows and id memory, migrated to this version; nothing when the saved version is unknown
        here (dropped: the windows refill from the events, as after a lost Redis)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(self.version_key)
            pipe.get(self.state_key)
            pipe.lrange(self.seen_key, 0, -1)
            raw_version, raw_state, raw_ids = await pipe.execute()
        version = found_version(raw_version, "demand")
        if restore_plan(version, STATE_VERSION, MIGRATES_FROM) == "rebuild":
            say_rebuild("demand", version, STATE_VERSION)
            await self.redis.delete(self.state_key, self.seen_key, self.version_key, self.checkpoint_key)
            return None, []
        # a state that does not validate raises here: the service starts with empty windows and says why
        ids = [i.decode() for i in raw_ids]
        if not raw_state:
            return None, ids
        if version in (1, 2):  # positional lists: named, then re-keyed; the next checkpoint writes 4
            return from_positional(json.loads(raw_state)), ids
        if version == 3:  # workers under the job system's names: re-keyed by producer
            return producers_keyed(json.loads(raw_state)), ids
        return SavedDemand.model_validate_json(raw_state), ids

    async def save(
        self, state: SavedDemand, new_seen_ids: list[str], token: str, unanswered: dict[str, int] | None = None
    ) -> int:
        """Write one checkpoint under `token`. `new_seen_ids` begins with the ids of the checkpoints in
        `unanswered` (token → how many of the first ids it carried) whose answer was lost: those Redis already
        holds are skipped. Returns how many were."""
        skipped = await self.redis.eval(
            _SAVE,
            4,
            self.state_key,
            self.version_key,
            self.seen_key,
            self.checkpoint_key,
            state.model_dump_json(),
            marker("demand", STATE_VERSION),
            token,
            json.dumps(unanswered or {}),
            str(self.seen_capacity),
            *new_seen_ids,
        )
        return int(skipped)

    async def close(self) -> None:
        await self.redis.aclose()
