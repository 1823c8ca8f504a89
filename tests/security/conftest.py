"""A private nats-server on FleetPilot's own authorization file (deploy/nats/auth.conf), fresh passwords per test."""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NatsClient

from shared.settings import Settings
from shared.streams import ensure_streams
from sim.infra import NatsServer, RedisServer

REPO = Path(__file__).resolve().parents[2]
AUTH_CONF = REPO / "deploy" / "nats" / "auth.conf"

# Every user the authorization file defines; the test below checks the file agrees.
USERS = ("demand", "fleet", "provisioner", "decider", "bench", "jobs", "operator")

# nats-server logs each refusal as: ... "$G/user:<name>" - Publish Violation - Subject "<subject>"
_VIOLATION = re.compile(
    r'user:(?P<user>[\w-]+)" - (?P<kind>Publish|Subscription) Violation - .*?Subject "(?P<subject>[^"]+)"'
)


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
        )

    async def connect(self, user: str, errors: list[Exception] | None = None) -> NatsClient:
        async def record(error: Exception) -> None:
            if errors is not None:
                errors.append(error)

        client = await nats.connect(
            self.url, user=user, password=self.passwords[user], error_cb=record, max_reconnect_attempts=0
        )
        self.clients.append(client)
        return client

    def violations(self, user: str | None = None) -> list[tuple[str, str, str]]:
        """(user, Publish|Subscription, subject) for each refusal the server logged."""
        found = [(m["user"], m["kind"], m["subject"]) for m in _VIOLATION.finditer(self.server.log_path.read_text())]
        return [v for v in found if user is None or v[0] == user]

    async def declare_streams(self) -> None:
        """As a service does at start-up, with a service's own credentials (decider's here)."""
        client = await self.connect("decider")
        await ensure_streams(client.jetstream(), self.settings("decider").subjects)


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
        yield secured
    finally:
        for client in secured.clients:
            with contextlib.suppress(Exception):
                await client.close()
        server.close()
