"""Time is passed in: a real clock in production, a simulated one in tests, a scaled one in the demo."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import mmap
import struct
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
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


class ClockControl:
    """The shared anchors of a governed clock: (simulated time, wall time, speed) in a 32-byte memory-mapped file.

    One writer (the stack's governor) moves the anchors to "now" whenever it changes the speed, so simulated time
    never jumps; every process of the stack reads them at each `now()`. A sequence number makes a read that
    overlaps a write retry (a seqlock), so no reader ever sees half of one write and half of another.
    """

    LAYOUT = struct.Struct("<Qddd")  # sequence (odd while a write is under way), sim anchor s, wall anchor s, speed

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), self.LAYOUT.size)

    @classmethod
    def create(cls, path: Path, sim_anchor: datetime, wall_anchor_s: float, speed: float) -> ClockControl:
        if speed <= 0:
            raise ValueError(f"clock speed must be positive, got {speed}")
        path.write_bytes(cls.LAYOUT.pack(0, sim_anchor.timestamp(), wall_anchor_s, speed))
        return cls(path)

    def read(self) -> tuple[float, float, float]:
        """(sim anchor as epoch seconds, wall anchor as epoch seconds, speed)."""
        while True:
            sequence, sim_anchor_s, wall_anchor_s, speed = self.LAYOUT.unpack_from(self._map)
            if sequence % 2 == 0 and struct.unpack_from("<Q", self._map)[0] == sequence:
                return sim_anchor_s, wall_anchor_s, speed

    def sim_s(self, wall_s: float) -> float:
        sim_anchor_s, wall_anchor_s, speed = self.read()
        return sim_anchor_s + (wall_s - wall_anchor_s) * speed

    def set_speed(self, speed: float, wall_s: float | None = None) -> None:
        """Run at `speed` from `wall_s` (default now) on, continuing from the simulated time reached then."""
        if speed <= 0:
            raise ValueError(f"clock speed must be positive, got {speed}")
        wall = time.time() if wall_s is None else wall_s
        sim = self.sim_s(wall)
        sequence = struct.unpack_from("<Q", self._map)[0]
        struct.pack_into("<Q", self._map, 0, sequence + 1)
        struct.pack_into("<ddd", self._map, 8, sim, wall, speed)
        struct.pack_into("<Q", self._map, 0, sequence + 2)

    def close(self) -> None:
        self._map.close()


class GovernedClock:
    """A scaled clock whose speed the stack's governor may change at any moment (see `ClockControl`): the demo
    and the fault suite slow their simulated time while the machine cannot give the stack the CPU it needs, so a
    second of starvation is not six simulated minutes in which no worker spoke. `offset_s` runs this process's
    clock ahead of the others (a clock that jumped)."""

    RECHECK_WALL_S = 0.2  # a sleeper looks at the speed this often, so a change reaches it within this much wall time

    def __init__(self, control: ClockControl, offset_s: float = 0.0) -> None:
        self.control = control
        self.offset_s = offset_s

    @property
    def speed(self) -> float:
        return self.control.read()[2]

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.control.sim_s(time.time()) + self.offset_s, UTC)

    async def sleep(self, seconds: float) -> None:
        deadline = self.now() + timedelta(seconds=max(0.0, seconds))
        # polled, not an Event: the speed lives in another process's file, and a change must reach every sleeper
        while (remaining_s := (deadline - self.now()).total_seconds()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(min(remaining_s / self.speed, self.RECHECK_WALL_S))
        await asyncio.sleep(0)


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
