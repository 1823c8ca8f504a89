"""compose's and Kubernetes' two Redis servers, started from their own command lines: a user per service, each
confined to the keys its code writes, memory bounded, and an eviction policy that spares locks, leases and
idempotency results."""

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
from services.decider.directive_store import DirectiveStore
from services.decider.lock import RedisSingleFlight
from services.demand.store import DemandStore
from services.fleet.store import FleetStore
from services.provisioner.store import ProvisionerStore
from sim.infra import RedisServer
from tests.deploy.test_k8s import objects

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
PREFIX = "fp"  # what compose runs (nats/auth.conf is written for it too)
_DEFAULTED = re.compile(r"\$\{(?P<name>\w+):-(?P<default>[^}]*)\}")


def with_defaults(text: str) -> str:
    """`${VAR:-default}` as compose resolves it when .env leaves VAR unset."""
    return _DEFAULTED.sub(lambda match: match["default"], text)


class DeployedRedis(RedisServer):
    """The test fixture's Redis with a deployment's own arguments for one of its Redis servers added."""

    def __init__(self, args: list[str], data_dir: Path) -> None:
        super().__init__(data_dir=data_dir)
        self.deployed_args = args

    def command(self) -> list[str]:
        return [*super().command(), *self.deployed_args]


def compose_args(service: str) -> list[str]:
    return [with_defaults(str(arg)) for arg in COMPOSE["services"][service]["command"][1:]]


def service_redis_url(service: str) -> str:
    return with_defaults(COMPOSE["services"][service]["environment"]["FLEETPILOT_REDIS_URL"])


def k8s_password(variable: str) -> str:
    """What the operator's Secret would hold for `variable` (any value: the test only needs them to agree)."""
    return f"k8s-{variable.lower().replace('_', '-')}-9f1c"


def with_k8s_env(text: str) -> str:
    """`$(VAR)` as the kubelet expands it from the container's env (here: the test's Secret values)."""
    return re.sub(r"\$\((\w+)\)", lambda match: k8s_password(match[1]), text)


def k8s_redis_args(name: str) -> list[str]:
    [container] = objects("prod", "StatefulSet")[name]["spec"]["template"]["spec"]["containers"]
    args = [with_k8s_env(arg) for arg in container["args"][1:]]
    at = args.index("--dir")  # the fixture's own data directory, not the volume's
    return args[:at] + args[at + 2 :]


def k8s_service_redis_url(service: str) -> str:
    [container] = objects("prod", "Deployment")[service]["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    secret = env["FLEETPILOT_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "fleetpilot-redis", "key": f"{service}-password"}
    # the redis StatefulSets read the same Secret key under the user's own variable name
    url = env["FLEETPILOT_REDIS_URL"]["value"].replace("$(FLEETPILOT_REDIS_PASSWORD)", f"$({service.upper()}_PASSWORD)")
    return with_k8s_env(url)


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
        "decider": [
            lock.lock_key,
            lock.fence_key,
            *RedisAgentStore(client, PREFIX).keys,
            *DirectiveStore(client, PREFIX).keys,
        ],
        "bench": [bench._report_key("fleetpilot:launch-1:0"), bench._pending_key],
    }


SERVERS = ("redis", "redis-bench")
# the servers of one deployment by name, and each service's Redis URL there
Deployed = tuple[dict[str, DeployedRedis], dict[str, str]]
SERVICES = ("demand", "fleet", "provisioner", "decider", "bench")


@pytest.fixture(params=["compose", "k8s"])
def deployed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[dict[str, DeployedRedis], dict[str, str]]]:
    """Both Redis servers as one deployment runs them, and each service's Redis URL there."""
    if request.param == "compose":
        servers = {name: DeployedRedis(compose_args(name), tmp_path / name) for name in SERVERS}
        urls = {service: service_redis_url(service) for service in SERVICES}
    else:
        servers = {name: DeployedRedis(k8s_redis_args(name), tmp_path / name) for name in SERVERS}
        urls = {service: k8s_service_redis_url(service) for service in SERVICES}
    for server in servers.values():
        server.start()
    yield servers, urls
    for server in servers.values():
        server.stop()


def connect(server: RedisServer, url: str | None = None) -> redis.Redis:
    """A client of `server` as the user and password in `url` (anonymous without one)."""
    parts = urlsplit(url or "redis://127.0.0.1")
    return redis.Redis(host="127.0.0.1", port=server.port, username=parts.username, password=parts.password)


def password_of(args: list[str], user: str) -> str:
    """The `>password` of `--user <user> ...` in a Redis command line."""
    start = next(i for i in range(len(args) - 1) if args[i] == "--user" and args[i + 1] == user)
    return next(arg for arg in args[start + 2 :] if arg.startswith(">")).removeprefix(">")


def server_of(url: str) -> str:
    return urlsplit(url).hostname or ""


def test_each_service_reaches_only_its_own_keys(deployed: Deployed) -> None:
    servers, urls = deployed
    written = keys_each_service_writes()
    for service, keys in written.items():
        url = urls[service]
        client = connect(servers[server_of(url)], url)
        for key in keys:
            assert client.set(key, "1"), (service, key)
        others = [key for other, other_keys in written.items() if other != service for key in other_keys]
        for key in others:
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.get(key)
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.flushall()


def test_an_anonymous_client_may_only_ping(deployed: Deployed) -> None:
    for server in deployed[0].values():
        anonymous = connect(server)
        assert anonymous.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            anonymous.get(f"fleetpilot:{PREFIX}:fleet:instances")


def test_memory_is_bounded_and_eviction_spares_what_has_no_ttl_or_everything(
    deployed: Deployed,
) -> None:
    """The lock, the lease and idempotency results carry TTLs: a volatile-* policy would evict them first, so the
    shared Redis never evicts; bench's own (internet-fed, every report with a TTL) evicts by LRU among TTL keys."""
    servers, urls = deployed
    expected = {"redis": "noeviction", "redis-bench": "volatile-lru"}
    for name, server in servers.items():
        admin_password = "".join(
            a.removeprefix(">") for a in server.deployed_args if a.startswith(">") and "admin" in a
        )
        admin = connect(server, f"redis://admin:{admin_password}@{name}")
        assert int(admin.config_get("maxmemory")["maxmemory"]) > 0, name
        assert admin.config_get("maxmemory-policy")["maxmemory-policy"] == expected[name]
    assert server_of(urls["bench"]) == "redis-bench"  # internet-fed data: not in the shared Redis
    assert {server_of(urls[s]) for s in SERVICES if s != "bench"} == {"redis"}
