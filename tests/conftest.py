"""Fixtures on real servers: a private nats-server (JetStream) and redis-server per test, on free ports.

No mocks of NATS or Redis anywhere: fault tests stop, kill and restart these mid-test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from shared.clock import SimulatedClock
from shared.settings import Settings
from shared.streams import ensure_streams
from sim.infra import NatsServer, RedisServer


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    server = NatsServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def sim_clock() -> SimulatedClock:
    return SimulatedClock(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))


@pytest.fixture
def settings(nats_server: NatsServer, redis_server: RedisServer) -> Settings:
    """Settings pointing at this test's private servers; a distinct prefix catches hard-coded subjects.

    The streams exist, as the admin step (`fleetpilot streams ensure`) makes them before any service starts.
    """
    settings = Settings(
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        subject_prefix="fpt",
        vast_api_key="test-key-never-logged",  # type: ignore[arg-type]
        decider_mode="live",  # the services under test act; shadow mode (the default) has tests of its own
    )
    nats_server.ensure_streams(settings.subjects)
    return settings


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[NatsClient]:
    client = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    yield client
    with contextlib.suppress(Exception):
        await client.close()


@pytest.fixture
async def js(nc: NatsClient, settings: Settings) -> JetStreamContext:
    context = nc.jetstream()
    await ensure_streams(context, settings.subjects)
    return context
