"""`python -m evaluation.agent.smoke` (`make agent-smoke`): one real decision with the configured Ollama.

A dry run: the situation's demand and fleet, the decider's real policy and guardrails, an operator question,
actions recorded and never published, the session kept in memory. Exit 0 when the model gave a usable
decision, 1 when the agent degraded, 2 when no usable Ollama is reachable.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid

import httpx
from ollama import AsyncClient, ResponseError
from prometheus_client import CollectorRegistry

from evaluation.agent import situation
from evaluation.agent.dryrun import DryRunPorts
from services.decider.advisor import RunInputs
from services.decider.agent.agent import OllamaAgent
from services.decider.agent.config import AgentConfig
from services.decider.agent.store import InMemoryAgentStore
from services.decider.decision import policy_actions
from services.decider.policy import PredictivePolicy
from shared.clock import RealClock
from shared.contract import OperatorMessage, TriggerReason, TriggerRef
from shared.settings import Settings

REACH_TIMEOUT_S = 10.0
SOURCE = "decider"
DEFAULT_QUESTION = "Why are you launching machines, and what will it cost per hour?"


def model_names(names: list[str]) -> set[str]:
    """`qwen3` and `qwen3:latest` name the same model."""
    return set(names) | {n.removesuffix(":latest") for n in names}


async def check_ollama(settings: Settings) -> str | None:
    """None when the host answers and has the model with tool support; else what is wrong, in words."""
    host, model = settings.ollama_host, settings.ollama_model
    client = AsyncClient(host=host, timeout=REACH_TIMEOUT_S)
    try:
        listed = await client.list()
        if model not in model_names([m.model or "" for m in listed.models]):
            have = ", ".join(m.model or "?" for m in listed.models) or "none"
            return f"model {model!r} is not pulled on {host} (it has: {have}): run `ollama pull {model}`"
        shown = await client.show(model)
    except (ConnectionError, httpx.HTTPError, ResponseError, ValueError) as error:
        return (
            f"no Ollama reachable at {host} ({type(error).__name__}: {str(error)[:200]}). Start one (`ollama serve`)"
            " or point FLEETPILOT_OLLAMA_HOST at it"
        )
    finally:
        await client._client.aclose()
    capabilities = list(shown.capabilities or [])
    if capabilities and "tools" not in capabilities:
        return f"model {model!r} does not support tools (capabilities: {capabilities}); pick one that does"
    return None


def smoke_inputs(question: str) -> RunInputs:
    now = RealClock().now()
    signal = situation.demand_signal(now)
    snapshot = situation.small_fleet(now)
    recommendation = PredictivePolicy().recommend(signal, snapshot, now)
    run_id = f"smoke-{uuid.uuid4().hex[:12]}"
    message = OperatorMessage(
        occurred_at=now, source="cli", conversation_id=f"{run_id}-q", operator="smoke", text=question
    )
    return RunInputs(
        run_id=run_id,
        now=now,
        triggers=[TriggerRef(priority="p0", reason=TriggerReason.OPERATOR_MESSAGE, event_id=message.event_id)],
        signal=signal,
        snapshot=snapshot,
        recommendation=recommendation.explanation,
        recommended_actions=policy_actions(recommendation, run_id, now, SOURCE),
        operator_messages=[message],
    )


async def smoke(settings: Settings, config: AgentConfig, question: str) -> int:
    problem = await check_ollama(settings)
    if problem:
        print(f"agent smoke: {problem}.", file=sys.stderr)
        print("Then run `make agent-smoke` again. Models known to handle tools: see the README.", file=sys.stderr)
        return 2
    inputs = smoke_inputs(question)
    ports = DryRunPorts.for_inputs(settings, inputs)
    agent = OllamaAgent(
        settings=settings, clock=RealClock(), store=InMemoryAgentStore(), registry=CollectorRegistry(), config=config
    )
    print(f"agent smoke: {settings.ollama_model} at {settings.ollama_host}, dry run (nothing is published)")
    print(f"policy: {inputs.recommendation}")
    try:
        outcome = await agent.advise(inputs, ports)
    finally:
        await agent.aclose()
    trace = outcome.trace
    print(f"status: {outcome.status}; rounds {trace.rounds}; largest prompt {trace.prompt_tokens} tokens (counted)")
    for call in trace.tool_calls:
        print(f"  tool: {call}")
    for verdict in ports.verdicts:
        print(f"  guardrail: {verdict.verdict} {verdict.rule or ''} {verdict.explanation}")
    print(f"OBSERVATION: {trace.observation}\nASSESSMENT: {trace.assessment}\nDECISION: {trace.decision}")
    for reply in ports.replies:
        print(f"reply to the operator:\n{reply.text}")
    if outcome.next_check_s:
        print(f"next check asked in {outcome.next_check_s} s")
    return 0 if outcome.status == "ok" else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.agent.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--question", default=DEFAULT_QUESTION, help="the operator question in the situation")
    args = parser.parse_args(argv)
    return asyncio.run(smoke(Settings(), AgentConfig(), args.question))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
