"""Fixtures for provisioner tests: the vast.ai simulator over real HTTP, and clients of it."""

from __future__ import annotations

import asyncio
from datetime import datetime

from shared.clock import SimulatedClock
from tests.sim_vast.harness import start_vast

__all__ = ["AdvancingClock", "start_vast"]


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
