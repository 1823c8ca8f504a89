"""Messages and processes: duplicate deliveries, a poison message on every subject a service consumes, and each
service killed with SIGKILL while it holds an unacknowledged message (or, for the decider, the run lock)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from shared.streams import BENCH, COMMANDS, DEMAND, INSTANCES, LATEST
from tests.faults.harness import SUBJECTS, FaultStack, Row, metric_total, running_stack
from tests.helpers import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

DUPLICATES = 60
POISON = b'{"poison": "a message no contract model accepts"}'

# Every subject a service consumes, with the services that consume it (services/*/app.py subscribers).
CONSUMED: dict[str, tuple[str, ...]] = {
    SUBJECTS.task("submitted"): ("demand", "fleet"),
    SUBJECTS.queue: ("demand", "fleet"),
    SUBJECTS.fleet_snapshot_published: ("demand", "provisioner"),
    SUBJECTS.demand_signal: ("provisioner",),
    f"{SUBJECTS.prefix}.provision.instance.running": ("fleet",),
    SUBJECTS.bench_result: ("fleet", "provisioner"),
    SUBJECTS.bench_request: ("bench",),
    SUBJECTS.fleet_drain: ("fleet",),
    SUBJECTS.provision_command("launch"): ("provisioner",),
    SUBJECTS.provision_command("stop"): ("provisioner",),
    SUBJECTS.provision_command("destroy"): ("provisioner",),
    f"{SUBJECTS.prefix}.trigger.p0.operator_message": ("decider",),
    f"{SUBJECTS.prefix}.trigger.p1.demand_trend": ("decider",),
    SUBJECTS.operator_message: ("decider",),
    SUBJECTS.fleet_snapshot: ("fleet",),  # request/reply on core NATS
    SUBJECTS.provision_offers: ("provisioner",),  # request/reply on core NATS
}
CORE_NATS = {SUBJECTS.fleet_snapshot, SUBJECTS.provision_offers}

# Where each service is "mid-handler": a durable consumer holding delivered, unacknowledged messages.
IN_FLIGHT: dict[str, list[tuple[str, str]]] = {
    "demand": [(DEMAND.name(SUBJECTS), "demand-tasks")],
    "fleet": [(DEMAND.name(SUBJECTS), "fleet-tasks"), (INSTANCES.name(SUBJECTS), "fleet-instances")],
    "provisioner": [(COMMANDS.name(SUBJECTS), f"provisioner-{verb}") for verb in ("launch", "destroy", "stop")]
    + [(LATEST.name(SUBJECTS), "provisioner-demand")],
    "bench": [(BENCH.name(SUBJECTS), "bench")],
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[FaultStack]:
    async with running_stack("services") as running:
        yield running


async def test_duplicate_deliveries(stack: FaultStack, fault_rows: list[Row]) -> None:
    """The same task events published again under new message ids: JetStream stores them, demand must not apply."""
    assert stack.replayer is not None
    replayer = stack.replayer
    await eventually(lambda: len(replayer.recent) >= DUPLICATES, timeout_s=60)
    window = await stack.begin(f"duplicate deliveries ({DUPLICATES} events re-published, new Nats-Msg-Id)")
    ignored_before = metric_total(await stack.metrics("demand"), "fleetpilot_duplicate_events_total", service="demand")
    again = list(stack.replayer.recent)[-DUPLICATES:]
    for event in again:
        await stack.replayer.publish(SUBJECTS.task(event.kind), event, msg_id=f"{event.event_id}-again")
    await stack.conclude(window, fault_rows)
    ignored = metric_total(await stack.metrics("demand"), "fleetpilot_duplicate_events_total", service="demand")
    assert ignored - ignored_before >= DUPLICATES


async def test_poison_on_every_consumed_subject(stack: FaultStack, fault_rows: list[Row]) -> None:
    assert stack.js is not None and stack.nc is not None
    window = await stack.begin(f"poison message on each of {len(CONSUMED)} consumed subjects")
    for subject, services in CONSUMED.items():
        if subject in CORE_NATS:
            await stack.nc.publish(subject, POISON)
        else:
            await stack.js.publish(subject, POISON)
        for service in services:
            stack.expected_dead_letters[(service, subject)] += 1
    await stack.nc.flush()
    await stack.conclude(window, fault_rows)  # its dead-letter check wants exactly these, once each
    assert not stack.stack.crashed()


async def wait_mid_handler(stack: FaultStack, service: str, timeout_s: float = 30.0) -> str | None:
    """What `service` is in the middle of, once it is: a consumer's unacked message, or the decider's lock."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if service == "decider":
            if await stack.lock_held():
                return "mid decider run"
        else:
            for stream, durable in IN_FLIGHT[service]:
                if await stack.ack_pending(stream, durable):
                    return f"mid {durable}"
        await asyncio.sleep(0.002)
    return None


@pytest.mark.parametrize("service", ["demand", "fleet", "provisioner", "decider", "bench"])
async def test_service_killed_mid_handler(stack: FaultStack, fault_rows: list[Row], service: str) -> None:
    caught = await wait_mid_handler(stack, service)
    window = await stack.begin(f"SIGKILL {service}" + (f" ({caught})" if caught else " (idle)"))
    await asyncio.to_thread(stack.stack.kill, service)
    await asyncio.sleep(0.5)
    await asyncio.to_thread(stack.stack.restart, service)
    stack.note_restart(service)
    await stack.conclude(window, fault_rows)
    if service != "bench":  # bench's handler is a few milliseconds of Redis: it may be idle whenever we look
        assert caught, f"{service} was never seen mid-handler"
