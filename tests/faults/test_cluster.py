"""A three-node JetStream cluster losing nodes under load: every stream has three replicas; the node leading the
task-event stream is SIGKILLed mid-traffic, and while it is still down a second node goes for a short window
(the cluster has no quorum then: publishes wait, nothing acknowledged may be lost). Two decider replicas run, so
"single flight" is a claim about two processes racing for the lock through all of it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from shared.contract import DecisionRecord
from shared.processes import free_port
from shared.streams import ALL_STREAMS, AUDIT, DEMAND
from sim.infra import NatsCluster
from tests.faults.harness import DEFAULT_PROCESS_ENV, RESTART_WAIT_S, SUBJECTS, FaultStack, Row, running_stack
from tests.helpers import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODES = 3
# task events the job system must get acknowledged by the two surviving nodes before the second one goes
ACKED_WITHOUT_THE_LEADER = 20
SECOND_NODE_DOWN_S = 2.0  # wall: a short loss of quorum (~24 simulated minutes at x720)
SECOND_DECIDER = "decider-2"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[FaultStack]:
    async with running_stack("cluster", nats_nodes=NODES) as running:
        # a second decider replica, racing the first for the single-flight lock
        running.stack.process_env[SECOND_DECIDER] = {
            **DEFAULT_PROCESS_ENV["decider"],
            "FLEETPILOT_DECIDER_REPLICA_ID": "second",
        }
        command = [*running.stack.commands["decider"][0]]
        await asyncio.to_thread(running.stack.spawn, SECOND_DECIDER, command, free_port())
        await asyncio.to_thread(running.stack.wait_serving, SECOND_DECIDER, 60)
        # its HTTP port opens before its broker has bound its consumers: a fault then would kill its start-up
        await eventually(lambda: healthy(running, running.stack.port_of(SECOND_DECIDER)), timeout_s=120)
        yield running


async def healthy(stack: FaultStack, port: int) -> bool:
    try:
        return (await stack.http.get(f"http://127.0.0.1:{port}/health")).status_code == 200
    except httpx.HTTPError:
        return False


def cluster_of(stack: FaultStack) -> NatsCluster:
    cluster = stack.stack.nats
    assert isinstance(cluster, NatsCluster)
    return cluster


async def stream_leader(stack: FaultStack, stream: str) -> str | None:
    assert stack.js is not None
    try:
        info = await stack.js.stream_info(stream)
    except Exception:  # no leader at this moment (an election under way)
        return None
    return info.cluster.leader if info.cluster is not None else None


async def decision_records(stack: FaultStack) -> list[DecisionRecord]:
    return [DecisionRecord.model_validate_json(raw) for raw in await stack.read_stream(AUDIT.name(SUBJECTS))]


def overlapping_runs(records: list[DecisionRecord]) -> list[tuple[str, str]]:
    """Pairs of runs whose [started_at, finished_at] intersect: there must be none, whichever replica ran them."""
    ordered = sorted(records, key=lambda record: record.started_at)
    return [
        (earlier.run_id, later.run_id)
        for earlier, later in itertools.pairwise(ordered)
        if later.started_at < earlier.finished_at
    ]


async def test_every_stream_has_three_replicas(stack: FaultStack) -> None:
    assert stack.js is not None
    for spec in ALL_STREAMS:
        info = await stack.js.stream_info(spec.name(SUBJECTS))
        assert info.config.num_replicas == NODES, spec.name(SUBJECTS)
        assert info.cluster is not None and len(info.cluster.replicas or []) == NODES - 1


async def test_stream_leader_killed_then_a_second_node_for_a_short_window(
    stack: FaultStack, fault_rows: list[Row]
) -> None:
    assert stack.replayer is not None
    replayer = stack.replayer
    cluster = cluster_of(stack)
    stream = DEMAND.name(SUBJECTS)
    leader = await eventually(lambda: stream_leader(stack, stream), timeout_s=RESTART_WAIT_S)
    runs_before = len(await decision_records(stack))
    window = await stack.begin(f"3-node cluster: {stream} leader SIGKILL, then a 2nd node {SECOND_NODE_DOWN_S:.0f} s")

    first = cluster.node(leader)
    await asyncio.to_thread(first.kill)
    # mid-traffic: the two survivors elect a new leader and keep acknowledging the job system's events
    acked_at_kill = len(replayer.acked)
    await eventually(lambda: len(replayer.acked) >= acked_at_kill + ACKED_WITHOUT_THE_LEADER, timeout_s=60)
    new_leader = await eventually(lambda: stream_leader(stack, stream), timeout_s=RESTART_WAIT_S)
    assert new_leader != leader

    # the second node (the new leader) goes too: one node of three, no quorum, publishes wait and retry
    second = cluster.node(new_leader)
    await asyncio.to_thread(second.kill)
    await asyncio.sleep(SECOND_NODE_DOWN_S)
    await asyncio.to_thread(second.start)
    await asyncio.to_thread(first.start)
    await asyncio.to_thread(cluster.wait_healthy)

    row = await stack.conclude(window, fault_rows)
    assert row.published >= ACKED_WITHOUT_THE_LEADER

    # single flight held across both replicas: no two runs overlapped, and fencing tokens never went back (a
    # process that takes the lock again keeps its token; another process taking it gets a larger one)
    records = await decision_records(stack)
    assert len(records) > runs_before, "no decision was recorded through the cluster's faults"
    assert overlapping_runs(records) == []
    tokens = [r.fencing_token for r in sorted(records, key=lambda record: record.started_at) if r.fencing_token]
    assert tokens == sorted(tokens)
    # and every process reconnected: none exited, each answers on its port again
    assert stack.stack.crashed() == []
