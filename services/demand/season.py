"""A season of arrivals (a day, by default) in coarse buckets: what followed this moment one season ago.

The windows in `windows.py` reach back six hours at minute resolution; a daily rhythm needs a whole day, for
which quarter hours are plenty. Memory: one number per bucket (97 for a day and an hour of quarter hours).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from services.demand.config import HOUR_S
from shared.contract import SeasonEcho


class ArrivalHistory:
    """Arrival counts per `bucket_s` bucket over the last `span_s`, in a ring."""

    __slots__ = ("bucket_s", "counts", "head", "n_slots", "slot_bucket")

    def __init__(self, bucket_s: int, span_s: int) -> None:
        self.bucket_s = bucket_s
        self.n_slots = math.ceil(span_s / bucket_s) + 1
        self.head = -1  # the newest bucket seen; -1 before any arrival
        self.slot_bucket = [-1] * self.n_slots
        self.counts = [0.0] * self.n_slots

    def add(self, at_s: float, amount: float) -> None:
        """Count arrivals at `at_s`; older than the ring reaches back, they are not counted (and not needed)."""
        bucket = int(at_s // self.bucket_s)
        if bucket <= self.head - self.n_slots:
            return
        self.head = max(self.head, bucket)
        slot = bucket % self.n_slots
        if self.slot_bucket[slot] != bucket:
            self.slot_bucket[slot] = bucket
            self.counts[slot] = 0.0
        self.counts[slot] += amount

    def count(self, bucket: int) -> float:
        """Arrivals in `bucket`: 0 for a bucket without any, or one the ring no longer holds."""
        slot = bucket % self.n_slots
        return self.counts[slot] if self.slot_bucket[slot] == bucket else 0.0

    def echo(self, now_s: float, season_s: int, ahead_s: int) -> SeasonEcho:
        """The season before `now_s`: the hour before it and the `ahead_s` after it, bucket by bucket.

        The first bucket starts at the first boundary at or after one season ago, so every bucket read is
        whole and lies in the past; its start is given, and the caller aligns by it.
        """
        first = math.ceil((now_s - season_s) / self.bucket_s)
        per_h = HOUR_S / self.bucket_s
        hour = max(1, HOUR_S // self.bucket_s)
        level = sum(self.count(b) for b in range(first - hour, first)) * per_h / hour
        ahead = max(1, ahead_s // self.bucket_s)
        return SeasonEcho(
            season_s=season_s,
            bucket_s=self.bucket_s,
            starts_at=datetime.fromtimestamp(first * self.bucket_s, UTC),
            level_then_per_h=level,
            rates_then_per_h=[self.count(b) * per_h for b in range(first, first + ahead)],
        )

    # persistence: the buckets holding arrivals
    def to_state(self) -> dict[str, Any]:
        held = [
            [bucket, self.counts[slot]]
            for slot, bucket in enumerate(self.slot_bucket)
            if bucket > self.head - self.n_slots and self.counts[slot]
        ]
        return {"head": self.head, "buckets": held}

    def load_state(self, state: dict[str, Any]) -> None:
        for bucket, count in state["buckets"]:
            self.add(int(bucket) * self.bucket_s, float(count))
        self.head = max(self.head, int(state["head"]))
