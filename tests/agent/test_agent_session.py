"""What the agent keeps between runs, on a real Redis: memories, plan and anchor survive; a lost, garbled or
unreachable session never breaks the next run; two runs never proceed at once."""

from __future__ import annotations

import asyncio
import json

from redis.asyncio import Redis

from evaluation.agent.dryrun import DryRunPorts
from services.decider.agent.store import RedisAgentStore
from sim.infra import RedisServer
from sim.ollama.server import OllamaStandIn
from tests.agent.builders import run_inputs
from tests.agent.conftest import AgentFactory, metric
from tests.helpers import eventually


async def observation_of(ollama: OllamaStandIn, request_index: int = -1) -> str:
    requests = await ollama.received(full=True)
    first_of_run = [r for r in requests if r["message_count"] >= 3][request_index]
    return next(m["content"] for m in first_of_run["messages"] if str(m.get("content", "")).startswith("RUN "))


async def first_requests_of_runs(ollama: OllamaStandIn) -> list[dict[str, object]]:
    requests = await ollama.received(full=True)
    return [r for r in requests if r["messages"][-1]["content"].startswith("RUN ")]  # type: ignore[index]


async def test_memories_plan_and_anchor_carry_over_to_the_next_run(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn, store: RedisAgentStore
) -> None:
    await ollama.set_behaviour("busy")
    agent = make_agent()
    await agent.advise(run_inputs("run-1"), ports)
    await agent.advise(run_inputs("run-2"), ports)

    _, second = await first_requests_of_runs(ollama)
    anchor = second["messages"][1]["content"]  # type: ignore[index]
    assert anchor.startswith("SESSION ANCHOR (state saved by earlier runs")
    assert json.loads(anchor.split(": ", 1)[1])["last_run_id"] == "run-1"
    observation = second["messages"][-1]["content"]  # type: ignore[index]
    assert "[fact] run run-1: DEMAND: under_provisioned" in observation
    assert "[high] [in_progress] watch demand after run run-1" in observation
    # the earlier run is in the history, its observation shrunk to a summary
    assert any(str(m["content"]).startswith("[earlier observation, run run-1") for m in second["messages"])  # type: ignore[attr-defined]
    state = await store.load()
    assert [m.text[:9] for m in state.memories] == ["run run-1", "run run-2"]
    assert state.anchor is not None and state.anchor.runs_total == 2 and state.problems == []


async def test_deleting_the_session_mid_life_does_not_break_the_next_run(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn, store: RedisAgentStore, redis_client: Redis
) -> None:
    await ollama.set_behaviour("busy")
    agent = make_agent()
    await agent.advise(run_inputs("run-1"), ports)
    await agent.advise(run_inputs("run-2"), ports)
    assert await redis_client.delete(store.key("session")) == 1

    outcome = await agent.advise(run_inputs("run-3"), ports)

    assert outcome.status == "ok" and outcome.trace.decision.startswith("followed the policy")
    observation = (await first_requests_of_runs(ollama))[-1]["messages"][-1]["content"]  # type: ignore[index]
    assert "NOTE: the conversation history of earlier runs was lost (session missing)" in observation
    assert "[fact] run run-2" in observation and "watch demand after run run-2" in observation  # rebuilt from these
    assert metric(agent, "fleetpilot_agent_session_rebuilds_total") == 1
    assert (await store.load()).problems == []  # saved again whole


async def test_garbage_in_every_saved_key_is_survived_and_replaced(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn, store: RedisAgentStore, redis_client: Redis
) -> None:
    await ollama.set_behaviour("busy")
    agent = make_agent()
    await agent.advise(run_inputs("run-1"), ports)
    for key in store.keys:
        await redis_client.set(key, b"\x00\xffnot json{")

    outcome = await agent.advise(run_inputs("run-2"), ports)

    assert outcome.status == "ok"
    observation = (await first_requests_of_runs(ollama))[-1]["messages"][-1]["content"]  # type: ignore[index]
    assert "session unreadable" in observation and "memories unreadable" in observation
    state = await store.load()
    assert state.problems == [] and state.anchor is not None and state.anchor.last_run_id == "run-2"
    assert [m.text[:9] for m in state.memories] == ["run run-2"]


async def test_a_wiped_redis_is_a_fresh_start_not_a_failure(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn, redis_client: Redis
) -> None:
    agent = make_agent()
    await agent.advise(run_inputs("run-1"), ports)
    await redis_client.flushdb()
    outcome = await agent.advise(run_inputs("run-2"), ports)
    assert outcome.status == "ok"
    second = (await first_requests_of_runs(ollama))[-1]
    assert second["messages"][1]["content"].startswith("SESSION ANCHOR: none yet")  # type: ignore[index]


async def test_redis_down_costs_the_memory_not_the_run(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn, redis_server: RedisServer
) -> None:
    await ollama.set_behaviour("busy")
    agent = make_agent()
    redis_server.stop()
    outcome = await agent.advise(run_inputs("run-1"), ports)

    assert outcome.status == "ok" and len(ports.allowed) == 1
    assert "state store unreachable" in await observation_of(ollama)
    assert any("remember" in call and "→ error" in call for call in outcome.trace.tool_calls)
    redis_server.start()
    assert (await agent.advise(run_inputs("run-2"), ports)).status == "ok"


async def test_a_second_run_while_one_is_active_is_refused_and_counted(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn
) -> None:
    await ollama.set_behaviour("slow", slow_s=0.5)
    agent = make_agent()
    first = asyncio.create_task(agent.advise(run_inputs("run-1"), ports))
    await eventually(lambda: ollama.state.in_flight > 0)
    second = await agent.advise(run_inputs("run-2"), ports)
    await first

    assert second.trace.status == "skipped" and "another agent run (run-1) was still active" in second.trace.decision
    assert metric(agent, "fleetpilot_agent_overlapping_runs_total") == 1
    assert len(ports.allowed) == 1  # only the first run acted
    third = await agent.advise(run_inputs("run-3"), ports)
    assert third.trace.status == "ok"  # the marker was released


async def test_many_runs_keep_history_memories_and_prompt_bounded(
    make_agent: AgentFactory, ports: DryRunPorts, ollama: OllamaStandIn, store: RedisAgentStore
) -> None:
    await ollama.set_behaviour("busy")
    agent = make_agent(memories_max=10, history_messages_max=20, token_budget=9_000)
    for n in range(25):
        assert (await agent.advise(run_inputs(f"run-{n}", actions=[]), ports)).status == "ok"

    state = await store.load()
    assert len(state.memories) == 10 and len(state.history) <= 20
    requests = await ollama.received()
    assert max(int(r["prompt_tokens"]) for r in requests) <= 9_000
    assert metric(agent, "fleetpilot_agent_request_prompt_tokens_bucket", le="10000.0") == len(requests)
    assert metric(agent, "fleetpilot_agent_prompt_tokens") <= 9_000
