"""The stack's clock governor: slows the shared simulated clock while the stack's processes wait for a CPU.

The demo runs every process of the stack on one clock, 360 times the wall. On a loaded machine a process
that waits a second for a CPU misses six simulated minutes: workers look silent, machines are judged dead and
replaced, and the outcome measures the machine's load instead of FleetPilot. The governor reads how long the
stack's threads waited on a run queue (`/proc/<pid>/task/<tid>/schedstat`, the kernel's own account), and
lowers the speed while that wait is a noticeable share of the wall time, raising it back when it is not:
multiplicative decrease, gentle increase, as a congestion window. A service can also fall behind without waiting
long in any one interval, reading a little slower than the clock writes: the stack's JetStream backlog (the most
messages a durable consumer has not had delivered) slows the clock too.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from shared.clock import ClockControl

# How late the most starved process of the stack fell, in simulated seconds: its run-queue wait over the last
# interval times the clock's speed (a process that waited 0.1 s at x720 answered 72 simulated seconds late).
# Tasks take minutes and fleet judges a worker silent after 15: lateness under a minute changes no decision.
LATE_HIGH_SIM_S = 60.0  # above: slow down
LATE_LOW_SIM_S = 20.0  # below: speed up again, up to the asked speed
# How far behind the stack's slowest reader is, in messages: the most any durable consumer has not had delivered
# yet. A service can fall behind without waiting on a run queue long in any one interval (it reads a little slower
# than the clock writes, interval after interval): a busy demo's fleet read its task events 8,000 behind at x113-x160
# while no process waited a minute's worth per interval, and it failed working producers as dead.
BACKLOG_HIGH = 500  # above: slow down (fleet stops judging silence past the same count)
BACKLOG_LOW = 100  # the speed rises again only below this
SLOW_DOWN = 0.7  # speed × this when the stack falls behind
SPEED_UP = 1.1  # speed × this when it keeps up
MIN_SPEED_SHARE = 0.02  # never below this share of the asked speed (a stopped clock would hide a hung stack)
INTERVAL_S = 0.5


def run_queue_wait_s(pid: int) -> float | None:
    """Seconds the threads of `pid` have waited on a run queue since they started (None: the process is gone)."""
    total_ns = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total_ns += int((task / "schedstat").read_text().split()[1])
    return total_ns / 1e9


def schedstat_available() -> bool:
    return Path("/proc/self/schedstat").exists()


@dataclass
class SpeedLog:
    """What the governor did: the speed over wall time, for the summary (asked vs achieved)."""

    asked: float
    started_wall_s: float = field(default_factory=time.time)
    started_sim_s: float = 0.0
    slowed_s: float = 0.0  # wall seconds spent below the asked speed
    lowest: float = float("inf")
    latest_late_sim_s: float = 0.0


class ClockGovernor:
    """A daemon thread that adjusts `control`'s speed from the run-queue wait of the processes `pids()` names and
    the stack's message backlog (`backlog()`: the most messages a durable consumer has not had delivered; None when
    it cannot be read, which slows nothing)."""

    def __init__(
        self,
        control: ClockControl,
        asked_speed: float,
        pids: Callable[[], list[int]],
        log_path: Path | None = None,
        backlog: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.control = control
        self.backlog = backlog
        self.log_path = log_path  # one line per change of speed: wall time, lateness, new speed
        self.asked = asked_speed
        self.pids = pids
        self.log = SpeedLog(asked_speed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_wait: dict[int, float] = {}
        # (wall s, sim s) at every speed change: maps a wall moment back to its simulated one (the dashboard)
        self.history: list[tuple[float, float]] = []

    def sim_at(self, wall_s: float) -> float:
        """The simulated time (epoch s) at a wall moment, through the speed changes recorded since `start`."""
        index = bisect.bisect_right(self.history, (wall_s, float("inf"))) - 1
        if index < 0:
            return self.control.sim_s(wall_s)
        if index + 1 < len(self.history):
            (w0, s0), (w1, s1) = self.history[index], self.history[index + 1]
            return s0 + (wall_s - w0) * (s1 - s0) / max(1e-9, w1 - w0)
        return self.control.sim_s(wall_s)

    def start(self) -> None:
        """Run at the asked speed from now on, governed."""
        now = time.time()
        sim_anchor_s, wall_anchor_s, _ = self.control.read()  # where the clock began, at its start-up speed
        self.control.set_speed(self.asked, now)
        self.log = SpeedLog(self.asked, started_wall_s=now, started_sim_s=self.control.sim_s(now))
        self.history = [(wall_anchor_s, sim_anchor_s), (now, self.log.started_sim_s)]
        self._last_wait = {}
        self._sample()
        if schedstat_available():
            self._thread = threading.Thread(target=self._loop, name="clock-governor", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def achieved_speed(self) -> float:
        """Simulated seconds per wall second since `start`, on average."""
        now = time.time()
        elapsed = now - self.log.started_wall_s
        if elapsed <= 0:
            return self.asked
        return (self.control.sim_s(now) - self.log.started_sim_s) / elapsed

    def _sample(self) -> float:
        """The longest run-queue wait of any one process of the stack since the last sample (new ones from 0)."""
        worst = 0.0
        seen: dict[int, float] = {}
        for pid in self.pids():
            total = run_queue_wait_s(pid)
            if total is None:
                continue
            seen[pid] = total
            worst = max(worst, total - self._last_wait.get(pid, total))
        self._last_wait = seen
        return worst

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(INTERVAL_S):
            now = time.monotonic()
            interval_s = max(1e-3, now - last)
            last = now
            self.step(self._sample(), interval_s, self.backlog() or 0)

    def step(self, worst_wait_s: float, interval_s: float, backlog: int = 0) -> float:
        """One adjustment from the longest wait of one process over the last interval and the stack's message
        backlog; returns the new speed."""
        before = speed = self.control.read()[2]
        late_sim_s = worst_wait_s * speed
        if late_sim_s > LATE_HIGH_SIM_S or backlog > BACKLOG_HIGH:
            speed = max(self.asked * MIN_SPEED_SHARE, speed * SLOW_DOWN)
        elif late_sim_s < LATE_LOW_SIM_S and backlog < BACKLOG_LOW:
            speed = min(self.asked, speed * SPEED_UP)
        if speed != before:
            now = time.time()
            self.control.set_speed(speed, now)
            self.history.append((now, self.control.sim_s(now)))
            if self.log_path is not None:
                with contextlib.suppress(OSError), open(self.log_path, "a") as log:
                    behind = f"late {late_sim_s:.0f} sim s, {backlog} undelivered"
                    log.write(f"{now:.2f} {behind}: x{before:.0f} -> x{speed:.0f}\n")
        if speed < self.asked:
            self.log.slowed_s += interval_s
        self.log.lowest = min(self.log.lowest, speed)
        self.log.latest_late_sim_s = late_sim_s
        return speed
