"""The task queue as a fluid: FIFO, arrivals spread evenly within each minute, served at the fleet's rate.

Between two events the arrival rate and the fleet's service rate are constant, so which task starts when is
known in closed form; a run of tasks whose waits change linearly is recorded at once, not one task at a time.
That keeps a week of a 1000-machine fleet (millions of tasks) at a few events per simulated minute.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.world.objective import WaitStats

EPS_TASKS = 1e-9


@dataclass
class QueueSegment:
    """Tasks that arrived evenly over [start_s, end_s) at `rate_per_s` and have not started yet."""

    start_s: float
    end_s: float
    rate_per_s: float

    @property
    def count(self) -> float:
        return (self.end_s - self.start_s) * self.rate_per_s


@dataclass(frozen=True)
class ServicePiece:
    """Over [start_s, end_s) tasks started at `rate_per_s` (for busy-machine bookkeeping)."""

    start_s: float
    end_s: float
    rate_per_s: float


@dataclass
class FluidQueue:
    waits: WaitStats
    segments: deque[QueueSegment] = field(default_factory=deque)
    count: float = 0.0
    arrived: float = 0.0
    started: float = 0.0
    last_empty_at_s: float | None = 0.0

    def advance(self, t0_s: float, t1_s: float, arrival_per_s: float, service_per_s: float) -> list[ServicePiece]:
        """Move from t0 to t1 with constant rates; returns how fast tasks started over the interval."""
        dt = t1_s - t0_s
        if dt <= 0:
            return []
        a, r = arrival_per_s, service_per_s
        q0 = self.count
        self.arrived += a * dt
        pieces: list[ServicePiece] = []
        if r > a and (q0 <= EPS_TASKS or q0 / (r - a) < dt):
            # the fleet catches up at te; from then on every arrival starts at once
            te = t0_s + (q0 / (r - a) if q0 > EPS_TASKS else 0.0)
            if te > t0_s:
                self._enqueue(t0_s, te, a)
                self._serve(t0_s, r, self.count)
                pieces.append(ServicePiece(t0_s, te, r))
            self._clear()
            immediate = a * (t1_s - te)
            self.waits.add_zero(immediate)
            self.started += immediate
            if self.last_empty_at_s is None:
                self.last_empty_at_s = te
            if immediate > 0:
                pieces.append(ServicePiece(te, t1_s, a))
        else:
            self._enqueue(t0_s, t1_s, a)
            self._serve(t0_s, r, r * dt)
            if r > 0:
                pieces.append(ServicePiece(t0_s, t1_s, r))
            if self.count > EPS_TASKS:
                self.last_empty_at_s = None
            elif self.last_empty_at_s is None:
                self.last_empty_at_s = t1_s
        return pieces

    def _enqueue(self, t0_s: float, t1_s: float, rate_per_s: float) -> None:
        if rate_per_s <= 0 or t1_s <= t0_s:
            return
        last = self.segments[-1] if self.segments else None
        if last is not None and last.rate_per_s == rate_per_s and abs(last.end_s - t0_s) < 1e-9:
            last.end_s = t1_s
        else:
            self.segments.append(QueueSegment(t0_s, t1_s, rate_per_s))
        self.count += (t1_s - t0_s) * rate_per_s

    def _serve(self, t0_s: float, service_per_s: float, amount: float) -> None:
        """Start `amount` tasks from the head at `service_per_s` from t0 (never more than are queued)."""
        if service_per_s <= 0 or amount <= EPS_TASKS:
            return
        remaining = min(amount, self.count)
        s = t0_s
        while remaining > EPS_TASKS and self.segments:
            head = self.segments[0]
            n = head.count
            k = n if n - remaining <= EPS_TASKS else remaining
            first_wait = s - head.start_s
            s_end = s + k / service_per_s
            last_wait = s_end - (head.start_s + k / head.rate_per_s)
            self.waits.add_run(k, first_wait, last_wait)
            if k >= n:
                self.segments.popleft()
            else:
                head.start_s += k / head.rate_per_s
            remaining -= k
            self.count -= k
            self.started += k
            s = s_end
        if self.count < EPS_TASKS:
            self._clear()

    def _clear(self) -> None:
        self.segments.clear()
        self.count = 0.0

    def charge_unserved(self, end_s: float) -> float:
        """At the end of a run: every task still queued is charged the wait it has had so far."""
        unserved = 0.0
        for segment in self.segments:
            self.waits.add_run(segment.count, end_s - segment.start_s, end_s - segment.end_s)
            unserved += segment.count
        return unserved
