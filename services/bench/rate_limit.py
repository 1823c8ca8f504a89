"""A token bucket per rented machine: how many report posts bench's intake takes from one instance.

Pure: the caller passes the time in. A genuine suite posts once and retries at most `REPORT_ATTEMPTS` times
with backoff, so a small burst and a slow refill never refuse it; a host posting in a loop gets 429s.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

# one bucket per label we issued; beyond this many the least recently seen is forgotten (it starts full again),
# so the limiter's memory stays bounded whatever posts
MAX_TRACKED_KEYS = 10_000


@dataclass
class _Bucket:
    tokens: float
    updated_s: float


class PerKeyRateLimit:
    def __init__(self, burst: int, per_minute: float, max_keys: int = MAX_TRACKED_KEYS) -> None:
        if burst < 1 or per_minute <= 0:
            raise ValueError(f"rate limit: burst >= 1 and per_minute > 0, got burst={burst}, per_minute={per_minute}")
        self.burst = burst
        self.per_s = per_minute / 60.0
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def allow(self, key: str, now_s: float) -> bool:
        """Take one post from `key`'s bucket at `now_s`; False when it is empty."""
        bucket = self._buckets.pop(key, None) or _Bucket(tokens=float(self.burst), updated_s=now_s)
        elapsed_s = max(0.0, now_s - bucket.updated_s)
        bucket.tokens = min(float(self.burst), bucket.tokens + elapsed_s * self.per_s)
        bucket.updated_s = now_s
        allowed = bucket.tokens >= 1.0
        if allowed:
            bucket.tokens -= 1.0
        self._buckets[key] = bucket
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return allowed
