"""Small helpers tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


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
