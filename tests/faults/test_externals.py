"""What FleetPilot depends on outside itself misbehaving: vast.ai's API in 5xx/429 storms, a 10-minute outage and
the retired v0 instance list answering 410; the model (Ollama) down and answering garbage."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from services.provisioner.reconcile import parse_label
from shared.contract import DecisionRecord, LaunchInstances, OperatorMessage, OperatorReply
from shared.streams import AUDIT, COMMANDS, OPERATOR
from tests.faults.harness import RESTART_WAIT_S, SUBJECTS, FaultStack, Row, running_stack
from tests.helpers import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

ENDPOINTS = ("search", "create", "list_v1", "show", "manage", "destroy")
STORM_SIM_S = 30 * 60
OUTAGE_SIM_S = 10 * 60
V0_SIM_S = 20 * 60
MODEL_FAULT_SIM_S = 20 * 60


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[FaultStack]:
    async with running_stack("externals") as running:
        yield running


async def launch_twice(stack: FaultStack, key: str) -> None:
    """One launch command delivered twice (two messages, one idempotency key), as a redelivery would."""
    assert stack.js is not None
    for _ in range(2):
        command = LaunchInstances(
            occurred_at=stack.now(),
            source="fault-suite",
            idempotency_key=key,
            requested_by="operator",
            count=2,
            launch_priority="normal",
            reason="operator_request",
        )
        payload = command.model_dump_json().encode()
        headers = {"Nats-Msg-Id": command.event_id}
        await stack.js.publish(
            SUBJECTS.provision_command("launch"), payload, headers=headers, stream=COMMANDS.name(SUBJECTS)
        )


async def test_vast_5xx_and_429_storm(stack: FaultStack, fault_rows: list[Row]) -> None:
    """Scripted 429s and 502s on every endpoint, creates that act and then answer 503 (the client cannot know
    whether the instance exists), and a third of all requests failing, for half a simulated hour."""
    window = await stack.begin("vast API 5xx/429 storm (30 sim-min, a third of calls failing)")
    faults: list[dict[str, Any]] = []
    for endpoint in ENDPOINTS:
        faults += [
            {"endpoint": endpoint, "kind": "rate_limit", "count": 10},
            {"endpoint": endpoint, "kind": "error", "status": 502, "count": 10},
        ]
    faults.append({"endpoint": "create", "kind": "error_after", "status": 503, "count": 3})
    await stack.vast_admin("faults", faults)
    await stack.vast_admin("api", {"server_error_rate": 0.33})
    key = f"storm-{uuid.uuid4().hex[:12]}"
    await launch_twice(stack, key)
    await stack.sleep_sim(STORM_SIM_S)
    await stack.vast_admin("api", {"server_error_rate": 0.0})
    leftover = await stack.vast_admin("faults", method="DELETE")
    await stack.conclude(window, fault_rows)
    ledger = await stack.ledger()
    assert ledger is not None
    mine = [e for e in ledger["entries"] if (parse_label(e["label"]) or ("",))[0] == key]
    assert len(mine) <= 2, f"one command of 2 instances delivered twice rented {len(mine)}"
    calls = await stack.vast_admin("calls", method="GET")
    assert any(c["outcome"] == "rate_limited" for c in calls) and any(c["outcome"] == "injected_error" for c in calls)
    assert all(f["endpoint"] in ENDPOINTS for f in leftover)  # what the storm did not use up was withdrawn


async def test_ambiguous_creates(stack: FaultStack, fault_rows: list[Row]) -> None:
    """Creates that rent the machine and then answer 503, for a command delivered twice: one instance per slot.

    One fault per slot of the command: a third was consumed only when the fleet's own policy happened to launch
    in the window, and the wait for it timed out when it did not."""
    window = await stack.begin("vast create acts then answers 503 (x2), command delivered twice")
    await stack.vast_admin("faults", [{"endpoint": "create", "kind": "error_after", "status": 503, "count": 2}])
    key = f"ambiguous-{uuid.uuid4().hex[:12]}"
    await launch_twice(stack, key)
    await eventually(lambda: _faults_used(stack), timeout_s=RESTART_WAIT_S)
    await stack.conclude(window, fault_rows)
    ledger = await stack.ledger()
    assert ledger is not None
    mine = [e for e in ledger["entries"] if (parse_label(e["label"]) or ("",))[0] == key]
    assert 1 <= len(mine) <= 2, f"one command of 2 instances delivered twice rented {len(mine)}"


async def _faults_used(stack: FaultStack) -> bool:
    return not await stack.vast_admin("faults", method="GET")


async def test_vast_ten_minute_outage(stack: FaultStack, fault_rows: list[Row]) -> None:
    window = await stack.begin("vast API outage (every call 5xx, 10 sim-min)")
    await stack.vast_admin("api", {"server_error_rate": 1.0})
    await stack.sleep_sim(OUTAGE_SIM_S)
    await stack.vast_admin("api", {"server_error_rate": 0.0})
    await stack.conclude(window, fault_rows)


async def test_v0_instance_list_answers_410(stack: FaultStack, fault_rows: list[Row]) -> None:
    """A provisioner still on the retired v0 list: its 410 is "fleet unknown", never "no instances"."""
    window = await stack.begin("v0 instance list answers 410 (provisioner on v0, 20 sim-min)")
    assert (await stack.vast_admin("api", method="GET"))["v0_list"] == "gone"
    await asyncio.to_thread(stack.stack.restart, "provisioner", env={"FLEETPILOT_PROVISIONER_INSTANCE_LIST_API": "v0"})
    # read after the v1 provisioner has exited: a launch it was finishing when the window began is not the v0 one's
    before = await stack.ledger()
    # the window counts from the v0 provisioner's first list (a slow start would otherwise leave it none)
    await eventually(lambda: _v0_list_refused(stack), timeout_s=RESTART_WAIT_S)
    await stack.sleep_sim(V0_SIM_S)
    during = await stack.ledger()
    snapshot = await stack.fleet_snapshot()
    await asyncio.to_thread(stack.stack.restart, "provisioner", env={"FLEETPILOT_PROVISIONER_INSTANCE_LIST_API": "v1"})
    await stack.conclude(window, fault_rows)
    assert before is not None and during is not None and snapshot is not None
    # nothing rented blind, and nothing the fleet knew was dropped as gone
    assert {e["instance_id"] for e in during["entries"]} == {e["instance_id"] for e in before["entries"]}
    live = {e["instance_id"] for e in during["entries"] if e["destroyed_at"] is None}
    assert live <= {line.instance_id for line in snapshot.instances}


async def _v0_list_refused(stack: FaultStack) -> bool:
    calls = await stack.vast_admin("calls", method="GET")
    return any(c["endpoint"] == "list_v0" and c["status"] == 410 for c in calls)


async def ask_operator_question(stack: FaultStack) -> OperatorMessage:
    assert stack.js is not None
    message = OperatorMessage(
        occurred_at=stack.now(), source="fault-suite", conversation_id=uuid.uuid4().hex, operator="ops", text="status?"
    )
    await stack.js.publish(
        SUBJECTS.operator_message,
        message.model_dump_json().encode(),
        headers={"Nats-Msg-Id": message.event_id},
        stream=OPERATOR.name(SUBJECTS),
    )
    return message


async def replies_to(stack: FaultStack, message: OperatorMessage) -> list[OperatorReply]:
    replies = [OperatorReply.model_validate_json(raw) for raw in await stack.read_stream(OPERATOR.name(SUBJECTS))
               if b'"in_reply_to"' in raw]  # fmt: skip
    return [reply for reply in replies if reply.in_reply_to == message.event_id]


async def degraded_runs(stack: FaultStack) -> int:
    records = [DecisionRecord.model_validate_json(raw) for raw in await stack.read_stream(AUDIT.name(SUBJECTS))]
    return sum(1 for r in records if r.agent is not None and r.agent.status == "degraded")


@pytest.mark.parametrize("how", ["down", "garbage"])
async def test_model_down_or_answering_garbage(stack: FaultStack, fault_rows: list[Row], how: str) -> None:
    """The decider decides by the policy alone meanwhile, and still answers the operator."""
    degraded_before = await degraded_runs(stack)
    window = await stack.begin(f"Ollama {'process killed' if how == 'down' else 'answers malformed JSON'} (20 sim-min)")
    if how == "down":
        await asyncio.to_thread(stack.stack.kill, "ollama")
    else:
        await stack.ollama_admin("behaviour", {"behaviour": "malformed_json"})
    message = await ask_operator_question(stack)
    await eventually(lambda: replies_to(stack, message), timeout_s=RESTART_WAIT_S)
    await stack.sleep_sim(MODEL_FAULT_SIM_S)
    if how == "down":
        await asyncio.to_thread(stack.stack.restart, "ollama")
    else:
        await stack.ollama_admin("behaviour", {"behaviour": "follow"})
    await stack.conclude(window, fault_rows)
    assert await degraded_runs(stack) > degraded_before
