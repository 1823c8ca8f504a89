"""The one score every policy gets: `objective_usd = cost_usd + delay_cost_usd`, and the waits behind it.

Delay cost charges each task-hour of waiting beyond a grace period. Defaults and why (README, "objective"):
a reference machine costs ~$0.50/h and finishes ~120 tasks/h, so a task costs ~$0.004 of machine time; at
$0.10 per task-hour, an hour of one machine's work (120 tasks) left waiting an extra hour costs $12, about
24 machine-hours — a policy cannot win by starving the queue. Waits inside the 15-minute grace (a few task
durations: a task waiting for a free slot on a right-sized fleet) cost nothing, so the old failure's burst
of 8 tasks, cleared by the running fleet in minutes, is worth no launch: a launch costs at least its 1-2 h
startup, ~$0.70.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEFAULT_GRACE_MIN = 15.0
DEFAULT_DELAY_USD_PER_TASK_H = 0.10


@dataclass(frozen=True)
class ObjectiveConfig:
    grace_min: float = DEFAULT_GRACE_MIN
    delay_usd_per_task_h: float = DEFAULT_DELAY_USD_PER_TASK_H

    def __post_init__(self) -> None:
        if self.grace_min < 0:
            raise ValueError(f"grace_min must be >= 0, got {self.grace_min}")
        if self.delay_usd_per_task_h < 0:
            raise ValueError(f"delay_usd_per_task_h must be >= 0, got {self.delay_usd_per_task_h}")

    @property
    def grace_s(self) -> float:
        return self.grace_min * 60.0


def mean_excess_s(lo_s: float, hi_s: float, grace_s: float) -> float:
    """Mean of max(0, w - grace) for w uniform on [lo, hi] (a run of tasks whose waits change linearly)."""
    if hi_s < lo_s:
        lo_s, hi_s = hi_s, lo_s
    if hi_s <= grace_s:
        return 0.0
    if lo_s >= grace_s:
        return (lo_s + hi_s) / 2 - grace_s
    return (hi_s - grace_s) ** 2 / (2 * (hi_s - lo_s))


@dataclass
class WaitStats:
    """Per-task waits, kept as runs of tasks whose waits change linearly (the fluid queue's output).

    Exact for the excess beyond the grace period and for the maximum; percentiles are found by bisection
    on the exact distribution.
    """

    grace_s: float
    zero_wait_tasks: float = 0.0
    excess_task_s: float = 0.0
    max_wait_s: float = 0.0
    _counts: list[float] = field(default_factory=list)
    _lo_s: list[float] = field(default_factory=list)
    _hi_s: list[float] = field(default_factory=list)

    def add_zero(self, count: float) -> None:
        if count > 0:
            self.zero_wait_tasks += count

    def add_run(self, count: float, first_wait_s: float, last_wait_s: float) -> None:
        if count <= 0:
            return
        lo_s, hi_s = max(0.0, min(first_wait_s, last_wait_s)), max(0.0, first_wait_s, last_wait_s)
        if hi_s <= 1e-9:
            self.zero_wait_tasks += count
            return
        self._counts.append(count)
        self._lo_s.append(lo_s)
        self._hi_s.append(hi_s)
        self.excess_task_s += count * mean_excess_s(lo_s, hi_s, self.grace_s)
        self.max_wait_s = max(self.max_wait_s, hi_s)

    @property
    def tasks(self) -> float:
        return self.zero_wait_tasks + sum(self._counts)

    def percentile_s(self, q: float) -> float:
        total = self.tasks
        if total <= 0:
            return 0.0
        target = q * total
        if self.zero_wait_tasks >= target:
            return 0.0
        counts, lo, hi = np.array(self._counts), np.array(self._lo_s), np.array(self._hi_s)
        width = np.maximum(hi - lo, 1e-12)

        def below(w: float) -> float:
            return self.zero_wait_tasks + float(np.sum(counts * np.clip((w - lo) / width, 0.0, 1.0)))

        low, high = 0.0, self.max_wait_s
        for _ in range(60):
            mid = (low + high) / 2
            if below(mid) >= target:
                high = mid
            else:
                low = mid
        return high
