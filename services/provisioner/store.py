"""What must survive a provisioner restart, in Redis: known instances, host history, answered commands, a lease.

Keys live under `fleetpilot:<subject prefix>:provisioner:` so several deployments can share one Redis.
"""

from __future__ import annotations

import secrets

from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.provisioner.budget import DaySpend
from services.provisioner.host_history import HostHistory
from services.provisioner.reconcile import KnownInstance
from shared.contract import ProvisionResult
from shared.state_version import found_version, marker, restore_plan, say_rebuild

# 2: the version marker is written; instances, host history and throughput are what version 1 (no marker) saved
STATE_VERSION = 2
MIGRATES_FROM = frozenset({1})
# what reconciliation rebuilds from vast.ai's list (instances carry our label) and later verdicts; answered
# commands, the fence and the lease are kept: they are small, keyed by id and guard against acting twice
REBUILT_PARTS = ("instances", "host_history", "observed_tasks_per_h")

RESULT_TTL_S = 7 * 86_400  # a command redelivered or re-sent within a week is answered, not acted on again

# compare-and-delete / compare-and-extend: only the holder may release or renew the lease
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)


# keep the newest fencing token; answer the newest after this one (this one itself when it is not older)
_FENCE = (
    "local newest = tonumber(redis.call('get', KEYS[1]) or '0') local token = tonumber(ARGV[1]) "
    "if token >= newest then redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) return token end "
    "redis.call('expire', KEYS[1], ARGV[2]) return newest"
)
# the fence matters for a lock's expiry time (seconds); a day bounds the refusals should the decider's counter
# ever restart lower (it lives in the same Redis, so a Redis that lost one lost both)
FENCE_TTL_S = 86_400


class ProvisionerStore:
    def __init__(self, redis: Redis, namespace: str) -> None:
        self.redis = redis
        self.namespace = namespace
        # leases whose release failed with Redis away (name → token): Redis's append-only file brings them back
        # with the rest of their life, so this replica releases its own before it next tries for one, instead of
        # waiting it out (the fleet lease's two minutes held commands until they were dead-lettered)
        self._unreleased: dict[str, str] = {}

    def _key(self, *parts: str) -> str:
        return ":".join((self.namespace, *parts))

    # ---- the version of what is saved -----------------------------------------------------------------------
    async def check_version(self) -> None:
        """Before the first load: an older version is migrated (1 → 2 changes nothing saved), an unknown one
        dropped, so reconciliation rebuilds the instances from vast.ai's list."""
        version = found_version(await self.redis.get(self._key("version")), "provisioner")
        if restore_plan(version, STATE_VERSION, MIGRATES_FROM) == "rebuild":
            say_rebuild("provisioner", version, STATE_VERSION)
            await self.redis.delete(*(self._key(part) for part in REBUILT_PARTS))
        await self.redis.set(self._key("version"), marker("provisioner", STATE_VERSION))

    # ---- instances --------------------------------------------------------------------------------------
    async def load_instances(self) -> dict[int, KnownInstance]:
        await self.check_version()  # loaded first of all, at start-up and on taking over the lease
        raw = await self.redis.hgetall(self._key("instances"))
        return {int(k): KnownInstance.model_validate_json(v) for k, v in raw.items()}

    async def save_instances(self, instances: list[KnownInstance]) -> None:
        if instances:
            pipe = self.redis.pipeline(transaction=True)
            for instance in instances:
                pipe.hset(self._key("instances"), str(instance.instance_id), instance.model_dump_json())
            await pipe.execute()

    async def forget_instances(self, instance_ids: list[int]) -> None:
        if instance_ids:
            await self.redis.hdel(self._key("instances"), *[str(i) for i in instance_ids])

    # ---- host history -----------------------------------------------------------------------------------
    async def load_history(self) -> HostHistory:
        raw = await self.redis.get(self._key("host_history"))
        return HostHistory.model_validate_json(raw) if raw else HostHistory()

    async def save_history(self, history: HostHistory) -> None:
        await self.redis.set(self._key("host_history"), history.model_dump_json())

    async def load_day_spend(self) -> DaySpend | None:
        raw = await self.redis.get(self._key("day_spend"))
        return DaySpend.model_validate_json(raw) if raw else None

    async def save_day_spend(self, spent: DaySpend) -> None:
        await self.redis.set(self._key("day_spend"), spent.model_dump_json())

    async def load_observed_throughput(self) -> dict[str, float]:
        raw = await self.redis.hgetall(self._key("observed_tasks_per_h"))
        return {k.decode() if isinstance(k, bytes) else k: float(v) for k, v in raw.items()}

    async def save_observed_throughput(self, by_model: dict[str, float]) -> None:
        if by_model:
            pipe = self.redis.pipeline(transaction=True)
            for model, rate in by_model.items():
                pipe.hset(self._key("observed_tasks_per_h"), model, str(rate))
            await pipe.execute()

    # ---- answered commands ------------------------------------------------------------------------------
    async def result_for(self, idempotency_key: str) -> ProvisionResult | None:
        raw = await self.redis.get(self._key("result", idempotency_key))
        return ProvisionResult.model_validate_json(raw) if raw else None

    async def save_result(self, result: ProvisionResult) -> None:
        await self.redis.set(self._key("result", result.idempotency_key), result.model_dump_json(), ex=RESULT_TTL_S)

    # ---- the decider's fencing token -----------------------------------------------------------------------
    async def admit_fencing_token(self, token: int) -> int:
        """Record `token` if it is the newest; the newest token seen so far either way."""
        newest = await self.redis.eval(_FENCE, 1, self._key("fence"), str(token), str(FENCE_TTL_S))
        return int(newest)

    # ---- a lease across replicas ------------------------------------------------------------------------
    async def try_lease(self, name: str, ttl_s: float) -> str | None:
        if (stale := self._unreleased.get(name)) is not None:
            await self.release_lease(name, stale)
        token = secrets.token_hex(8)
        taken = await self.redis.set(self._key("lease", name), token, nx=True, px=int(ttl_s * 1000))
        return token if taken else None

    async def renew_lease(self, name: str, token: str, ttl_s: float) -> bool:
        renewed = await self.redis.eval(_RENEW, 1, self._key("lease", name), token, str(int(ttl_s * 1000)))
        return bool(renewed)

    async def release_lease(self, name: str, token: str) -> None:
        try:
            await self.redis.eval(_RELEASE, 1, self._key("lease", name), token)
        except (RedisError, OSError):
            self._unreleased[name] = token
            raise
        if self._unreleased.get(name) == token:
            del self._unreleased[name]
