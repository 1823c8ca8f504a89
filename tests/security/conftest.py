"""A private nats-server on FleetPilot's own authorization file (deploy/nats/auth.conf), fresh passwords per test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import nats
import pytest
from nats.aio.client import Client as NatsClient
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from services.cli.main import app as cli_app
from shared.bus import inbox_prefix
from shared.processes import free_port, stop_process
from shared.settings import Settings
from shared.streams import ensure_streams
from sim.infra import NatsServer, RedisServer
from tests.helpers import eventually

REPO = Path(__file__).resolve().parents[2]
AUTH_CONF = REPO / "deploy" / "nats" / "auth.conf"

# Every user the authorization file defines; the test below checks the file agrees.
USERS = ("demand", "fleet", "provisioner", "decider", "bench", "jobs", "operator", "admin")

# nats-server logs each refusal as: ... "$G/user:<name>" - Publish Violation - Subject "<subject>"
_VIOLATION = re.compile(
    r'user:(?P<user>[\w-]+)" - (?P<kind>Publish|Subscription) Violation - .*?Subject "(?P<subject>[^"]+)"'
)


# what a service process needs besides NATS and Redis: nothing outside reachable, nothing real
SERVICE_ENV = {
    "FLEETPILOT_SUBJECT_PREFIX": "fp",
    "FLEETPILOT_HTTP_HOST": "127.0.0.1",
    "FLEETPILOT_VAST_API_URL": "http://127.0.0.1:9",
    "FLEETPILOT_VAST_API_KEY": "security-test-key",
    "FLEETPILOT_DECIDER_MODE": "live",
    "FLEETPILOT_OLLAMA_HOST": "http://127.0.0.1:9",
    "FLEETPILOT_BENCH_REPORT_TOKEN": "security-test-report-token",
    "FLEETPILOT_PROVISIONER_BENCH_URL": "http://127.0.0.1:9",
}


def password_variable(user: str) -> str:
    return f"{user.upper()}_PASSWORD"


@dataclass
class SecuredNats:
    server: NatsServer
    passwords: dict[str, str]
    redis_url: str
    clients: list[NatsClient] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def settings(self, user: str, *, password: str | None = None) -> Settings:
        """A service's settings with this user's credentials and the default prefix the policy is written for."""
        return Settings(
            nats_url=self.url,
            nats_user=user,
            nats_password=password if password is not None else self.passwords[user],  # type: ignore[arg-type]
            redis_url=self.redis_url,
            subject_prefix="fp",
            vast_api_key="security-test-key",  # type: ignore[arg-type]
            decider_mode="live",
        )

    async def connect(self, user: str, errors: list[Exception] | None = None) -> NatsClient:
        async def record(error: Exception) -> None:
            if errors is not None:
                errors.append(error)

        client = await nats.connect(
            self.url,
            user=user,
            password=self.passwords[user],
            inbox_prefix=inbox_prefix(self.settings(user)),
            error_cb=record,
            max_reconnect_attempts=0,
        )
        self.clients.append(client)
        return client

    def violations(self, user: str | None = None) -> list[tuple[str, str, str]]:
        """(user, Publish|Subscription, subject) for each refusal the server logged."""
        found = [(m["user"], m["kind"], m["subject"]) for m in _VIOLATION.finditer(self.server.log_path.read_text())]
        return [v for v in found if user is None or v[0] == user]

    async def cli(self, user: str, *args: str) -> tuple[int, str, str]:
        """`fleetpilot <args>` with this user's credentials: (exit code, stdout, stderr)."""
        env = {
            "FLEETPILOT_NATS_URL": self.url,
            "FLEETPILOT_NATS_USER": user,
            "FLEETPILOT_NATS_PASSWORD": self.passwords[user],
            "FLEETPILOT_SUBJECT_PREFIX": "fp",
        }
        result = await asyncio.to_thread(CliRunner().invoke, cli_app, list(args), env=env)
        return result.exit_code, result.stdout, result.stderr

    async def declare_streams(self) -> None:
        """As the admin step (`fleetpilot streams ensure`) does before the services start, as `admin`."""
        client = await self.connect("admin")
        await ensure_streams(client.jetstream(), self.settings("admin").subjects)


@pytest.fixture
def passwords(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Fresh random passwords in the environment the server is started from, as compose and k8s provide them."""
    # nats-server parses a variable's value as a config value: a password starts with a letter (see auth.conf)
    chosen = {user: f"p{secrets.token_hex(16)}" for user in USERS}
    for user, password in chosen.items():
        monkeypatch.setenv(password_variable(user), password)
    return chosen


@pytest.fixture
async def secured_nats(passwords: dict[str, str], redis_server: RedisServer) -> AsyncIterator[SecuredNats]:
    server = NatsServer(config_file=AUTH_CONF)
    server.start()
    secured = SecuredNats(server, passwords, redis_server.url)
    try:
        await secured.declare_streams()  # as every deployment does before its services start
        yield secured
    finally:
        for client in secured.clients:
            with contextlib.suppress(Exception):
                await client.close()
        server.close()


class ServiceProcess:
    """`fleetpilot run <service>` as production runs it, with the given NATS credentials."""

    def __init__(self, service: str, secured: SecuredNats, log_path: Path, *, password: str | None = None) -> None:
        self.service = service
        self.port = free_port()
        self.log_path = log_path
        env = {
            **os.environ,
            **SERVICE_ENV,
            "FLEETPILOT_NATS_URL": secured.url,
            "FLEETPILOT_NATS_USER": service,
            "FLEETPILOT_NATS_PASSWORD": password if password is not None else secured.passwords[service],
            "FLEETPILOT_REDIS_URL": secured.redis_url,
            "FLEETPILOT_HTTP_PORT": str(self.port),
        }
        command = [sys.executable, "-m", "services.cli.main", "run", service, "--log-level", "warning"]
        with open(log_path, "wb") as log_file:
            self.process = subprocess.Popen(command, env=env, stdout=log_file, stderr=log_file)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    async def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"{self.service} exited with {self.process.returncode}: {self.log()}")
        try:
            async with httpx.AsyncClient(timeout=1.0) as client:
                return (await client.get(f"http://127.0.0.1:{self.port}/health")).is_success
        except httpx.HTTPError:
            return False

    async def wait_healthy(self, timeout_s: float = 60) -> None:
        try:
            await eventually(self._healthy, timeout_s=timeout_s, interval_s=0.2)
        except AssertionError as error:
            raise AssertionError(f"{self.service} never became healthy: {error}; {self.log()}") from None

    async def sample(self, name: str, labels: dict[str, str]) -> float:
        async with httpx.AsyncClient(timeout=2.0) as client:
            text = (await client.get(f"http://127.0.0.1:{self.port}/metrics")).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return 0.0

    def stop(self) -> None:
        stop_process(self.process, timeout_s=15)


@pytest.fixture
def service_processes(tmp_path: Path) -> Iterator[list[ServiceProcess]]:
    """Started by the test (append to this list); every one is stopped, or killed, afterwards."""
    started: list[ServiceProcess] = []
    yield started
    for process in started:
        process.stop()
