"""The one way a service opens Redis: with timeouts, so a Redis that stops answering (a paused host, a dropped
link with no reset) fails a call in seconds, which the caller turns into a retry or an alert, instead of
holding a handler, and the lock or lease it holds, for ever."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

REDIS_TIMEOUT_S = 5.0


def connect_redis(url: str, timeout_s: float = REDIS_TIMEOUT_S, **options: Any) -> Redis:
    return Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, **options)
