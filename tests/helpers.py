"""Small helpers tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError


async def eventually(
    check: Callable[[], Awaitable[Any]] | Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.05
) -> Any:
    """Poll until `check` returns a truthy value (a wait for an outcome, never a timing assertion)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    last: Any = None
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        last = result
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s (last value: {last!r})")
        await asyncio.sleep(interval_s)


async def request_when_subscribed(nc: NatsClient, subject: str, data: bytes, answer_within_s: float = 10.0) -> Msg:
    """A request to a service just started: its subscription, made on its own connection, may reach the server
    after the request ("no responders", seen on a loaded machine), so that answer is retried for a while."""
    for _ in range(50):
        try:
            return await nc.request(subject, data, timeout=answer_within_s)
        except NoRespondersError:
            await asyncio.sleep(0.2)
    return await nc.request(subject, data, timeout=answer_within_s)
