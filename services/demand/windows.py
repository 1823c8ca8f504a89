"""Counters in fixed-width time buckets held in a ring, with running sums over trailing windows.

Memory is bounded by the longest window (no list of events); adding an event and reading a window are O(1)
in the number of events, so a week of a large fleet replays in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Field indices of one bucket's counters.
ARRIVALS = 0
STARTED = 1
COMPLETIONS = 2
FAILURES = 3
DURATION_SUM_S = 4
DURATIONS = 5
BUSY_COMPLETIONS = 6  # completions that followed the same worker's previous one within the busy gap cap
BUSY_S = 7  # seconds between those completions: the worker's time while it had work
N_FIELDS = 8


def _zeros() -> list[float]:
    return [0] * N_FIELDS


class BucketSeries:
    """One series (overall, a task type or a GPU model): a ring of buckets and a running sum per window.

    Window i (of `window_buckets[i]` buckets) covers the buckets (head - n, head], the newest one partial.
    For the arrival trend it also keeps sums over the n complete buckets [head - n, head - 1], so a slope
    is never dragged down by the bucket that is still filling.
    """

    __slots__ = (
        "cells",
        "complete_arrivals",
        "complete_x_arrivals",
        "head",
        "n_slots",
        "slot_bucket",
        "sums",
        "window_buckets",
    )

    def __init__(self, window_buckets: Sequence[int]) -> None:
        self.window_buckets = tuple(window_buckets)
        # one slot per bucket any window (partial or complete) can still read
        self.n_slots = max(self.window_buckets) + 1
        self.head = -1  # absolute index of the newest bucket; -1 before any data
        self.slot_bucket = [-1] * self.n_slots
        self.cells: list[list[float]] = [_zeros() for _ in range(self.n_slots)]
        self.sums: list[list[float]] = [_zeros() for _ in self.window_buckets]
        # integers, so the slope's difference of large products stays exact
        self.complete_arrivals = [0] * len(self.window_buckets)
        self.complete_x_arrivals = [0] * len(self.window_buckets)

    def accepts(self, bucket: int) -> bool:
        """False for a bucket older than every window (a too-late event)."""
        return self.head < 0 or bucket >= self.head - self.n_slots + 1

    def add(self, bucket: int, field: int, amount: float) -> bool:
        """Count `amount` into `field` of `bucket`; False (and nothing counted) if it is older than every window."""
        if bucket > self.head:
            self.advance(bucket)
        elif bucket < self.head - self.n_slots + 1:
            return False
        head = self.head
        slot = bucket % self.n_slots
        if self.slot_bucket[slot] != bucket:
            self.slot_bucket[slot] = bucket
            self.cells[slot] = _zeros()
        self.cells[slot][field] += amount
        for i, n in enumerate(self.window_buckets):
            if bucket > head - n:
                self.sums[i][field] += amount
        if field == ARRIVALS and bucket < head:
            whole = int(amount)
            for i, n in enumerate(self.window_buckets):
                if bucket >= head - n:
                    self.complete_arrivals[i] += whole
                    self.complete_x_arrivals[i] += bucket * whole
        return True

    def _cell(self, bucket: int) -> list[float] | None:
        slot = bucket % self.n_slots
        return self.cells[slot] if self.slot_bucket[slot] == bucket else None

    def advance(self, bucket: int) -> None:
        """Move the head forward to `bucket` (a query at a later time, or a newer event)."""
        old = self.head
        if bucket <= old:
            return
        self.head = bucket
        if old < 0:
            return
        steps = bucket - old
        for i, n in enumerate(self.window_buckets):
            window_sum = self.sums[i]
            if steps >= n:
                self.sums[i] = _zeros()
            else:
                for leaving in range(old - n + 1, bucket - n + 1):
                    cell = self._cell(leaving)
                    if cell is not None:
                        for f in range(N_FIELDS):
                            window_sum[f] -= cell[f]
            if steps > n:
                self.complete_arrivals[i] = 0
                self.complete_x_arrivals[i] = 0
            else:
                for leaving in range(old - n, bucket - n):
                    cell = self._cell(leaving)
                    if cell is not None and cell[ARRIVALS]:
                        self.complete_arrivals[i] -= int(cell[ARRIVALS])
                        self.complete_x_arrivals[i] -= leaving * int(cell[ARRIVALS])
                finished = self._cell(old)  # the old head is now complete
                if finished is not None and finished[ARRIVALS]:
                    self.complete_arrivals[i] += int(finished[ARRIVALS])
                    self.complete_x_arrivals[i] += old * int(finished[ARRIVALS])
        # slots of the new buckets held buckets that have now left every window
        if steps >= self.n_slots:
            self.slot_bucket = [-1] * self.n_slots
            self.cells = [_zeros() for _ in range(self.n_slots)]
        else:
            for new in range(old + 1, bucket + 1):
                slot = new % self.n_slots
                self.slot_bucket[slot] = new
                self.cells[slot] = _zeros()

    def window_sum(self, index: int, field: int) -> float:
        value = self.sums[index][field]
        return value if value > 1e-9 else 0.0  # float sums of seconds can leave a tiny residue

    def arrival_slope_per_bucket2(self, index: int, first_bucket: int) -> float:
        """Least-squares slope of arrivals per bucket over window `index`'s complete buckets since `first_bucket`."""
        lo = max(self.head - self.window_buckets[index], first_bucket)
        hi = self.head - 1
        m = hi - lo + 1
        if m < 3:
            return 0.0
        total = self.complete_arrivals[index]
        weighted = self.complete_x_arrivals[index]
        # slope = 12 * (Σxa - x̄Σa) / (m(m²-1)), written to stay in exact integers until the division
        return 6 * (2 * weighted - (lo + hi) * total) / (m * (m * m - 1))

    def sum_after(self, bucket: int, field: int) -> float:
        """Sum of `field` over the buckets strictly after `bucket` that the ring still holds."""
        total = 0.0
        for b in range(max(bucket + 1, self.head - self.n_slots + 1), self.head + 1):
            cell = self._cell(b)
            if cell is not None:
                total += cell[field]
        return total

    # persistence: the non-empty buckets; the running sums are recomputed on load (no drift carried over)
    def to_state(self) -> dict[str, Any]:
        cells = []
        for slot, bucket in enumerate(self.slot_bucket):
            if bucket >= 0 and bucket > self.head - self.n_slots and any(self.cells[slot]):
                cells.append([bucket, list(self.cells[slot])])
        return {"head": self.head, "cells": cells}

    @classmethod
    def from_state(cls, window_buckets: Sequence[int], state: dict[str, Any]) -> BucketSeries:
        series = cls(window_buckets)
        series.head = int(state["head"])
        for bucket, values in state["cells"]:
            bucket = int(bucket)
            if bucket <= series.head - series.n_slots or bucket > series.head:
                continue
            slot = bucket % series.n_slots
            series.slot_bucket[slot] = bucket
            series.cells[slot] = [int(v) if f in _INTEGER_FIELDS else float(v) for f, v in enumerate(values)]
        series._recompute_sums()
        return series

    def _recompute_sums(self) -> None:
        head = self.head
        for i, n in enumerate(self.window_buckets):
            self.sums[i] = _zeros()
            self.complete_arrivals[i] = 0
            self.complete_x_arrivals[i] = 0
            for bucket in range(head - n, head + 1):
                cell = self._cell(bucket)
                if cell is None:
                    continue
                if bucket > head - n:
                    for f in range(N_FIELDS):
                        self.sums[i][f] += cell[f]
                if bucket < head:
                    self.complete_arrivals[i] += int(cell[ARRIVALS])
                    self.complete_x_arrivals[i] += bucket * int(cell[ARRIVALS])


_INTEGER_FIELDS = frozenset({ARRIVALS, STARTED, COMPLETIONS, FAILURES, DURATIONS, BUSY_COMPLETIONS})
