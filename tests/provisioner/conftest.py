"""Fixtures for provisioner tests: the vast.ai simulator over real HTTP, and clients of it."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from nats.aio.client import Client as NatsClient

from shared.clock import SimulatedClock
from shared.settings import Settings
from tests.provisioner.service_harness import BusRecorder
from tests.sim_vast.harness import start_vast

__all__ = ["AdvancingClock", "bus", "start_vast"]


class AdvancingClock:
    """A client's sleeps move the simulated clock by exactly what it asked: waits happen in simulated time,
    the simulator on the same clock sees them, and the test records them."""

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.clock.now()

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(max(0.0, seconds))
        await asyncio.sleep(0)


@pytest.fixture
async def bus(nc: NatsClient, settings: Settings) -> BusRecorder:
    """Everything the provisioner publishes, recorded from before it starts."""
    recorder = BusRecorder(nc, settings)
    await recorder.start()
    return recorder
