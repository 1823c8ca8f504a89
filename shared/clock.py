"""Time is passed in: a real clock in production, a simulated one in tests, a scaled one in the demo."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current moment, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time (adapters only: the pure cores never sleep)."""
        ...


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ScaledClock:
    """Runs `speed` times faster than wall time from a shared epoch, so several processes agree on the time.

    The demo gives every process the same (sim_epoch, wall_epoch, speed), and each computes the same now().
    """

    def __init__(self, sim_epoch: datetime, wall_epoch_s: float, speed: float) -> None:
        if speed <= 0:
            raise ValueError(f"clock speed must be positive, got {speed}")
        self.sim_epoch = sim_epoch.astimezone(UTC)
        self.wall_epoch_s = wall_epoch_s
        self.speed = speed

    def now(self) -> datetime:
        return self.sim_epoch + timedelta(seconds=(time.time() - self.wall_epoch_s) * self.speed)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)


class SimulatedClock:
    """Moves only when told to. Sleepers wake, in time order, as `advance` passes their deadline."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = (start or datetime(2026, 1, 1, tzinfo=UTC)).astimezone(UTC)
        self._sleepers: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        """Jump to a moment (forward or, to test clock jumps, backward)."""
        self._now = moment.astimezone(UTC)
        self._wake_due()

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        self._wake_due()
        return self._now

    async def advance_and_settle(self, seconds: float, step_s: float | None = None) -> None:
        """Advance in steps, letting woken tasks run between steps (for asyncio tests on simulated time)."""
        step = step_s or seconds
        remaining = seconds
        while remaining > 1e-9:
            delta = min(step, remaining)
            self.advance(delta)
            remaining -= delta
            for _ in range(5):
                await asyncio.sleep(0)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + timedelta(seconds=seconds), next(self._order), future))
        await future

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
