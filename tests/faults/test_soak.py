"""The long variant (`make soak`): one stack through a simulated day and a seeded random sequence of faults, each
judged like the fast suite's, back to back, so faults land on a system still recovering from the last."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from sim.stack import SERVICES
from tests.faults.harness import FaultStack, Row, fault_plan, running_stack

pytestmark = [pytest.mark.soak, pytest.mark.asyncio]

FAULTS_IN_SEQUENCE = 30


async def nats_restart(stack: FaultStack) -> None:
    await asyncio.to_thread(stack.stack.nats.kill)
    await asyncio.sleep(1.0)
    await asyncio.to_thread(stack.stack.nats.start)


async def redis_restart(stack: FaultStack) -> None:
    await asyncio.to_thread(stack.stack.redis.kill)
    await asyncio.sleep(3.0)
    await asyncio.to_thread(stack.stack.redis.start)


def service_kill(name: str) -> Callable[[FaultStack], Awaitable[None]]:
    async def inject(stack: FaultStack) -> None:
        await asyncio.to_thread(stack.stack.kill, name)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(stack.stack.restart, name)
        stack.note_restart(name)

    return inject


async def vast_outage(stack: FaultStack) -> None:
    await stack.vast_admin("api", {"server_error_rate": 1.0})
    await stack.sleep_sim(10 * 60)
    await stack.vast_admin("api", {"server_error_rate": 0.0})


async def vast_storm(stack: FaultStack) -> None:
    await stack.vast_admin("api", {"server_error_rate": 0.33})
    await stack.vast_admin("faults", [{"endpoint": "create", "kind": "error_after", "status": 503, "count": 2}])
    await stack.sleep_sim(30 * 60)
    await stack.vast_admin("api", {"server_error_rate": 0.0})
    await stack.vast_admin("faults", method="DELETE")


async def model_down(stack: FaultStack) -> None:
    await asyncio.to_thread(stack.stack.kill, "ollama")
    await stack.sleep_sim(20 * 60)
    await asyncio.to_thread(stack.stack.restart, "ollama")


FAULTS: dict[str, Callable[[FaultStack], Awaitable[None]]] = {
    "nats restart": nats_restart,
    "redis restart": redis_restart,
    "vast outage": vast_outage,
    "vast storm": vast_storm,
    "model down": model_down,
    **{f"SIGKILL {name}": service_kill(name) for name in SERVICES},
}


async def test_a_day_of_random_faults(fault_rows: list[Row]) -> None:
    rng = random.Random(11)
    async with running_stack("soak", plan=fault_plan(speed=360.0, hours=24)) as stack:
        for number in range(FAULTS_IN_SEQUENCE):
            name = rng.choice(sorted(FAULTS))
            window = await stack.begin(f"soak {number + 1:02d}: {name}")
            await FAULTS[name](stack)
            await stack.end_fault(window)
            recovery_s = await stack.recover(window, timeout_s=90)
            await stack.finish(window, recovery_s, fault_rows)
