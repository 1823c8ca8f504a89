"""The broker and the state store taken away under load: nats-server killed and restarted (twice, the first time
while a decider run holds the lock), redis-server killed and restarted (the decider holds and alerts meanwhile)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sim.stack import SERVICES
from tests.faults.harness import DECIDER_FENCE_KEY, FaultStack, Row, metric_total, running_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

NATS_DOWN_S = 1.0  # wall: a restart, not an outage (~12 simulated minutes at x720)
REDIS_DOWN_S = 3.0  # wall: ~36 simulated minutes, several heartbeats and triggers for the decider to hold through


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[FaultStack]:
    async with running_stack("infra") as running:
        yield running


async def wait_for_run_in_progress(stack: FaultStack, timeout_s: float = 20.0) -> bool:
    """The decider's single-flight lock exists only while a run is in progress."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await stack.lock_held():
            return True
        await asyncio.sleep(0.002)
    return False


async def test_nats_killed_and_restarted_twice(stack: FaultStack, fault_rows: list[Row]) -> None:
    caught_run = await wait_for_run_in_progress(stack)
    window = await stack.begin("nats-server SIGKILL + restart x2" + (" (1st mid decider run)" if caught_run else ""))
    for _ in range(2):
        await asyncio.to_thread(stack.stack.nats.kill)
        await asyncio.sleep(NATS_DOWN_S)
        await asyncio.to_thread(stack.stack.nats.start)
        await asyncio.sleep(0.5)  # the second kill lands while everyone is still reconnecting
    await stack.conclude(window, fault_rows)
    assert caught_run, "no decider run was in progress to kill the broker under"


async def commands_seen(stack: FaultStack, seen: list[tuple[float, str, int | None]]) -> Any:
    """Every command the decider publishes, with the fencing token of the lease it was sent under."""
    assert stack.nc is not None

    async def on_command(msg: Any) -> None:
        token = json.loads(msg.data).get("fencing_token")
        seen.append((time.monotonic(), msg.subject, token))

    return await stack.nc.subscribe("fp.cmd.>", cb=on_command)


async def test_redis_killed_and_restarted(stack: FaultStack, fault_rows: list[Row]) -> None:
    assert stack.redis is not None
    commands: list[tuple[float, str, int | None]] = []
    subscription = await commands_seen(stack, commands)
    alerts_before = metric_total(
        await stack.metrics("decider"), "fleetpilot_decider_alerts_total", kind="redis_unavailable"
    )
    window = await stack.begin("redis-server SIGKILL + restart")
    # writes paused, so the copy of what was acknowledged is exact; then the crash
    await stack.redis.execute_command("CLIENT", "PAUSE", "3000", "WRITE")
    acknowledged = await stack.redis_dump()
    await asyncio.to_thread(stack.stack.redis.kill)
    durable = await stack.redis_dump_of_files()
    await asyncio.sleep(REDIS_DOWN_S)
    during = await stack.metrics("decider")
    await asyncio.to_thread(stack.stack.redis.start)
    restarted_at = time.monotonic()
    await stack.end_fault(window)
    recovery_s = await stack.recover(window)
    await subscription.unsubscribe()
    await stack.finish(window, recovery_s, fault_rows)

    # the decider held: no lease changed hands while it could not prove it held the lock. The fencing token comes
    # from Redis and grows whenever another process takes the lock, so a command sent under a lease taken while
    # Redis was down would carry a token above the last one Redis issued before it died. (Judged by token, not by
    # arrival time: a command whose lock check passed just before the kill may reach us any time later on a loaded
    # machine, and is no fault.)
    fence_at_kill = int(acknowledged[DECIDER_FENCE_KEY]["value"])
    received_before_restart = [(subject, token) for at, subject, token in commands if at < restarted_at]
    new_leases = [(subject, token) for subject, token in received_before_restart if (token or 0) > fence_at_kill]
    assert not new_leases, f"commands under a lease taken while Redis was down: {new_leases}"
    # ... and alerted
    assert metric_total(during, "fleetpilot_decider_lock_backend_up") == 0
    alerts = metric_total(during, "fleetpilot_decider_alerts_total", kind="redis_unavailable")
    assert alerts > alerts_before
    assert "ALERT redis_unavailable" in (stack.workdir / "decider.log").read_text(errors="replace")
    # what Redis acknowledged came back from its append-only file: windows, fleet, agent memory, plan, anchor
    lasting = {k: v for k, v in acknowledged.items() if not v["expires"]}
    assert any(k.endswith("demand:state") for k in lasting) and any(k.endswith("fleet:instances") for k in lasting)
    changed = [k for k, v in lasting.items() if durable.get(k) != v]
    assert not changed, f"keys Redis acknowledged but lost or changed by the crash: {changed}"


async def test_clock_jumps_forward_an_hour(stack: FaultStack, fault_rows: list[Row]) -> None:
    """Our hosts' clock steps an hour ahead while vast.ai's and the job system's do not (last: the skew stays).

    A process computes now() from FLEETPILOT_CLOCK_* and cannot be moved while it runs, so every service stops
    and comes back an hour ahead: time-in-state limits, windows, heartbeats and the lock all see the jump at
    once, against state saved under the old time and events stamped by the outside world's clock.
    """
    window = await stack.begin("clock jumps +1 h (services only)")
    await asyncio.to_thread(stack.stack.restart_all, list(SERVICES), clock_offset_s=3600.0)
    stack.note_restart("demand")
    await stack.conclude(window, fault_rows)


async def test_the_secret_search_finds_a_planted_key(stack: FaultStack) -> None:
    """The key search that every fault ends with can fail: a key written where a log would be is found."""
    planted = stack.workdir / "planted.log"
    planted.write_text(f"connecting with Authorization: Bearer {stack.api_key}\n")
    try:
        assert await stack.secret_findings() == ["planted.log"]
    finally:
        planted.unlink()
    assert await stack.secret_findings() == []
