"""Fixtures for the agent: the Ollama stand-in in-process over real HTTP, a real Redis, an agent factory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from evaluation.agent.dryrun import DryRunPorts
from services.decider.agent.agent import OllamaAgent
from services.decider.agent.config import AgentConfig
from services.decider.agent.store import RedisAgentStore
from shared.clock import SimulatedClock
from shared.settings import Settings
from sim.infra import RedisServer
from sim.ollama.server import OllamaStandIn
from tests.agent.ports import guarded_ports

AgentFactory = Callable[..., OllamaAgent]


@pytest.fixture
async def ollama() -> AsyncIterator[OllamaStandIn]:
    async with OllamaStandIn() as standin:
        yield standin


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url, socket_timeout=2.0, socket_connect_timeout=2.0)
    yield client
    await client.aclose()


@pytest.fixture
def agent_settings(redis_server: RedisServer, ollama: OllamaStandIn) -> Settings:
    return Settings(redis_url=redis_server.url, ollama_host=ollama.url, subject_prefix="fpt")


@pytest.fixture
def ports(agent_settings: Settings) -> DryRunPorts:
    """For runs on the default `run_inputs()`; other inputs take `guarded_ports(settings, inputs)`."""
    return guarded_ports(agent_settings)


@pytest.fixture
def store(redis_client: Redis, agent_settings: Settings) -> RedisAgentStore:
    return RedisAgentStore(redis_client, agent_settings.subject_prefix)


@pytest.fixture
async def make_agent(
    agent_settings: Settings, store: RedisAgentStore, sim_clock: SimulatedClock
) -> AsyncIterator[AgentFactory]:
    created: list[OllamaAgent] = []

    def factory(**config: Any) -> OllamaAgent:
        agent = OllamaAgent(
            settings=agent_settings,
            clock=sim_clock,
            store=store,
            registry=CollectorRegistry(),
            config=AgentConfig(**config),
        )
        created.append(agent)
        return agent

    yield factory
    for agent in created:
        await agent.aclose()


def metric(agent: OllamaAgent, name: str, **labels: str) -> float:
    return agent.registry.get_sample_value(name, labels) or 0.0
