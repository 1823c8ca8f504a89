"""Fixtures for bench: OpenAI-compatible stand-ins as child processes, measured over real HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sim.openai.process import OpenAIStandIn
from sim.openai.server import StandInConfig


@pytest.fixture
def standin() -> Iterator[Callable[[StandInConfig], OpenAIStandIn]]:
    """Start stand-ins with a given speed; all are stopped after the test."""
    started: list[OpenAIStandIn] = []

    def start(config: StandInConfig) -> OpenAIStandIn:
        server = OpenAIStandIn(config)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()
