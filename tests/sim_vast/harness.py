"""Starting the vast.ai simulator in a test: real HTTP on a free port, on the test's event loop and clock."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from shared.clock import SimulatedClock
from sim.vast.runner import serving
from sim.vast.scenario import Scenario
from sim.vast.server import VastSimulator

API_KEY = "test-key-never-logged"  # the same key tests/conftest.py puts in Settings

StartVast = Callable[..., Awaitable[tuple[VastSimulator, str]]]


@pytest.fixture
async def start_vast(sim_clock: SimulatedClock) -> AsyncIterator[StartVast]:
    """`sim, url = await start_vast(scenario)`: a simulator on `sim_clock`, stopped after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(scenario: Scenario | None = None, api_key: str = API_KEY) -> tuple[VastSimulator, str]:
            simulator = VastSimulator(scenario or Scenario.quiet(), api_key, sim_clock)
            url = await stack.enter_async_context(serving(simulator))
            return simulator, url

        yield start


def authed(url: str, api_key: str = API_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
