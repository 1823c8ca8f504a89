"""The agent soak: consecutive decider runs with the agent as advisor, on private NATS and Redis and the Ollama
stand-in over HTTP, every run adding a memory, rewriting the plan and reading a large offer list.

Two decider replicas share the lock; each burst fires P0 and P1 triggers together while a fast heartbeat
runs on its own. Reports the largest prompt the stand-in received against the token budget, and how many
pairs of advisor runs overlapped in wall time. Reference in the same run: one bare chat round trip.

    python -m benchmarks.agent [--runs 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from typing import Any

import nats
from ollama import AsyncClient
from redis.asyncio import Redis

from benchmarks.common import write_result
from evaluation.agent.harness import AgentStack, answer_offer_queries
from services.decider.agent.config import AgentConfig
from services.decider.agent.store import RedisAgentStore
from shared.clock import RealClock
from shared.contract import TriggerReason
from shared.settings import Settings
from shared.streams import ensure_streams
from sim.infra import NatsServer, RedisServer
from sim.ollama.server import OllamaStandIn

NAME = "agent"
OFFERS_PER_QUERY = 50
OFFER_NOTE = " " + "datacenter rack row aisle " * 4  # ~130 chars per offer line: ~7 kB per look-up
OPERATOR_EVERY = 10  # every tenth burst carries an operator question too
# fast triggers on the real clock so runs come back to back
DECIDER_TIMING = {"p1_quiet_s": 0.05, "p1_max_delay_s": 0.2, "heartbeat_s": 0.5, "lock_retry_s": 0.05}
RUN_WAIT_S = 60.0
SOAK_SETUP_S = 120.0
RUN_BOUND_S = 1.0  # a run takes tens of milliseconds here; the soak fails rather than hangs past this
REFERENCE_CALLS = 20


async def wait_for_run(stack: AgentStack, before: int) -> None:
    deadline = time.monotonic() + RUN_WAIT_S
    while len(stack.recorder.intervals) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no advisor run within {RUN_WAIT_S:.0f} s after run {before}")
        await asyncio.sleep(0.002)


async def reference_round_trip_ms(ollama_url: str, model: str) -> float:
    """A bare chat request of a first-run-sized prompt, no decider and no agent around it."""
    client = AsyncClient(host=ollama_url, timeout=10.0)
    messages = [{"role": "user", "content": "POLICY RECOMMENDATION: hold\n" + "#1001 RTX 4090 producing\n" * 200}]
    timings = []
    for _ in range(REFERENCE_CALLS):
        started = time.perf_counter()
        await client.chat(model=model, messages=messages)
        timings.append((time.perf_counter() - started) * 1000)
    await client._client.aclose()
    return statistics.median(timings)


async def soak(runs: int) -> dict[str, Any]:
    agent_config = AgentConfig(call_timeout_s=20)
    with NatsServer() as nats_server, RedisServer() as redis_server:
        settings = Settings(
            nats_url=nats_server.url, redis_url=redis_server.url, subject_prefix="fpb", decider_mode="live"
        )
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await ensure_streams(js, settings.subjects)
        clock = RealClock()
        async with OllamaStandIn(behaviour="busy") as ollama:
            reference_ms = await reference_round_trip_ms(ollama.url, ollama.state.model)
            ollama.state.reset()
            await answer_offer_queries(nc, settings, clock, OFFERS_PER_QUERY, OFFER_NOTE)
            stack = AgentStack(settings, clock, js, ollama.url)
            replicas = [
                await stack.start_replica("r1", agent_config, **DECIDER_TIMING),
                await stack.start_replica("r2", agent_config, **DECIDER_TIMING),
            ]
            started = time.perf_counter()
            try:
                burst = 0
                while len(stack.recorder.intervals) < runs:
                    if burst % 50 == 0:
                        await stack.publish_inputs()  # keep the inputs fresh
                    before = len(stack.recorder.intervals)
                    fired = [
                        stack.trigger("p0", TriggerReason.INSTANCE_FAILED),
                        stack.trigger("p1", TriggerReason.INSTANCE_TRANSITION),
                    ]
                    if burst % OPERATOR_EVERY == 0:
                        message = stack.operator_message(f"how is the fleet doing? ({burst})", f"soak-{burst}")
                        fired.append(stack.send_operator_message(message))
                    await asyncio.gather(*fired)
                    await wait_for_run(stack, before)
                    burst += 1
                wall_s = time.perf_counter() - started
                for _ in range(int(RUN_WAIT_S * 100)):  # let a run still in progress finish
                    if not stack.recorder.active:
                        break
                    await asyncio.sleep(0.01)
            finally:
                await stack.close()
            received = list(ollama.state.received)
            max_in_flight = ollama.state.max_in_flight
        redis = Redis.from_url(redis_server.url)
        state = await RedisAgentStore(redis, settings.subject_prefix).load()
        await redis.aclose()
        await nc.close()

    recorder = stack.recorder
    stand_in_tokens = [int(r["prompt_tokens"]) for r in received]
    return {
        "runs": len(recorder.intervals),
        "max_prompt_tokens": max(stand_in_tokens),
        "token_budget": agent_config.token_budget,
        "overlapping_runs": recorder.overlapping_pairs,
        "max_concurrent_runs": recorder.max_active,
        "max_concurrent_model_requests": max_in_flight,
        "agent_counted_max_prompt_tokens": max(recorder.prompt_tokens),
        "first_run_prompt_tokens": stand_in_tokens[0],
        "median_prompt_tokens_last_100_requests": statistics.median(stand_in_tokens[-100:]),
        "model_requests": len(received),
        "degraded_runs": sum(1 for s in recorder.statuses if s == "degraded"),
        "agent_refused_overlaps": sum(r.sample("fleetpilot_agent_overlapping_runs_total") for r in replicas),
        "decider_lock_busy": sum(r.sample("fleetpilot_decider_lock_attempts_total", outcome="busy") for r in replicas),
        "memories_kept": len(state.memories),
        "memories_max": agent_config.memories_max,
        "history_turns_kept": len(state.history),
        "wall_s": round(wall_s, 2),
        "runs_per_s": round(len(recorder.intervals) / wall_s, 2),
        "median_run_ms": round(statistics.median((end - start) * 1000 for start, end in recorder.intervals), 1),
        "reference_bare_chat_round_trip_ms": round(reference_ms, 2),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="advisor runs to make (default 1000)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    logging.disable(logging.INFO)  # FastStream logs every message at INFO: thousands of lines
    # a hang fails loudly instead of holding `make bench` forever
    result = asyncio.run(asyncio.wait_for(soak(args.runs), timeout=SOAK_SETUP_S + args.runs * RUN_BOUND_S))
    width = max(len(k) for k in result)
    print(f"{'measure':<{width}}  value")
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    path = write_result(NAME, result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
