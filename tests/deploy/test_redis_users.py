"""compose's two Redis servers, started from their own command lines: a user per service, each confined to the
keys its code writes, memory bounded, and an eviction policy that spares locks, leases and idempotency results."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import yaml

from services.bench.store import BenchStore
from services.decider.agent.store import RedisAgentStore
from services.decider.lock import RedisSingleFlight
from services.demand.store import DemandStore
from services.fleet.store import FleetStore
from services.provisioner.store import ProvisionerStore
from sim.infra import RedisServer

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
PREFIX = "fp"  # what compose runs (nats/auth.conf is written for it too)
_DEFAULTED = re.compile(r"\$\{(?P<name>\w+):-(?P<default>[^}]*)\}")


def with_defaults(text: str) -> str:
    """`${VAR:-default}` as compose resolves it when .env leaves VAR unset."""
    return _DEFAULTED.sub(lambda match: match["default"], text)


class ComposeRedis(RedisServer):
    """The test fixture's Redis with compose's own arguments for one of its Redis services added."""

    def __init__(self, service: str, data_dir: Path) -> None:
        super().__init__(data_dir=data_dir)
        self.compose_args = [with_defaults(str(arg)) for arg in COMPOSE["services"][service]["command"][1:]]

    def command(self) -> list[str]:
        return [*super().command(), *self.compose_args]


def service_redis_url(service: str) -> str:
    return with_defaults(COMPOSE["services"][service]["environment"]["FLEETPILOT_REDIS_URL"])


def keys_each_service_writes() -> dict[str, list[str]]:
    """Key names taken from the stores themselves, so a renamed key that leaves its user's pattern fails here."""
    url = "redis://127.0.0.1:1/0"  # never connected: only the key names are read
    client: Any = redis.asyncio.Redis.from_url(url)
    lock = RedisSingleFlight(url, PREFIX, "replica-0", 30.0)
    provisioner = ProvisionerStore(client, f"fleetpilot:{PREFIX}:provisioner")
    bench = BenchStore(client, PREFIX, 60.0)
    return {
        "demand": [DemandStore(url, PREFIX, 10).state_key],
        "fleet": [FleetStore(url, PREFIX).instances_key],
        "provisioner": [provisioner._key("instances"), provisioner._key("result", "launch-1")],
        "decider": [lock.lock_key, lock.fence_key, *RedisAgentStore(client, PREFIX).keys],
        "bench": [bench._report_key("fleetpilot:launch-1:0"), bench._pending_key],
    }


@pytest.fixture
def compose_redis(tmp_path: Path) -> Iterator[dict[str, ComposeRedis]]:
    servers = {name: ComposeRedis(name, tmp_path / name) for name in ("redis", "redis-bench")}
    for server in servers.values():
        server.start()
    yield servers
    for server in servers.values():
        server.stop()


def connect(server: RedisServer, url: str | None = None) -> redis.Redis:
    """A client of `server` as the user and password in `url` (anonymous without one)."""
    parts = urlsplit(url or "redis://127.0.0.1")
    return redis.Redis(host="127.0.0.1", port=server.port, username=parts.username, password=parts.password)


def server_of(url: str) -> str:
    return urlsplit(url).hostname or ""


def test_each_service_reaches_only_its_own_keys(compose_redis: dict[str, ComposeRedis]) -> None:
    written = keys_each_service_writes()
    for service, keys in written.items():
        url = service_redis_url(service)
        client = connect(compose_redis[server_of(url)], url)
        for key in keys:
            assert client.set(key, "1"), (service, key)
        others = [key for other, other_keys in written.items() if other != service for key in other_keys]
        for key in others:
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.get(key)
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.flushall()


def test_an_anonymous_client_may_only_ping(compose_redis: dict[str, ComposeRedis]) -> None:
    for server in compose_redis.values():
        anonymous = connect(server)
        assert anonymous.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            anonymous.get(f"fleetpilot:{PREFIX}:fleet:instances")


def test_memory_is_bounded_and_eviction_spares_what_has_no_ttl_or_everything(
    compose_redis: dict[str, ComposeRedis],
) -> None:
    """The lock, the lease and idempotency results carry TTLs: a volatile-* policy would evict them first, so the
    shared Redis never evicts; bench's own (internet-fed, every report with a TTL) evicts by LRU among TTL keys."""
    expected = {"redis": "noeviction", "redis-bench": "volatile-lru"}
    admin_password = with_defaults("${REDIS_ADMIN_PASSWORD:-radmin-dev}")
    for name, server in compose_redis.items():
        admin = connect(server, f"redis://admin:{admin_password}@{name}")
        assert int(admin.config_get("maxmemory")["maxmemory"]) > 0, name
        assert admin.config_get("maxmemory-policy")["maxmemory-policy"] == expected[name]
    assert server_of(service_redis_url("bench")) == "redis-bench"  # internet-fed data: not in the shared Redis
    assert {server_of(service_redis_url(s)) for s in ("demand", "fleet", "provisioner", "decider")} == {"redis"}
