"""The agent as the decider holds it: the model client, the run marker, the session's state; each run is an
`AgentRun` (run.py).

It implements the decider's `Advisor`. Every action goes through `ports.act` (the decider's guardrails); the model
is reached through the ollama client, so the same code talks to a real Ollama and to the stand-in.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

import httpx
from ollama import AsyncClient, ChatResponse, ResponseError
from prometheus_client import CollectorRegistry
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from services.decider.agent.config import AgentConfig
from services.decider.agent.context import ContextBudgetError, Turn
from services.decider.agent.failures import ModelFailure
from services.decider.agent.metrics import AgentMetrics
from services.decider.agent.reading import READING_MAX_TOKENS, Reading, reading_prompt
from services.decider.agent.record_reader import JetStreamRecordReader, RecordReader
from services.decider.agent.run import AgentRun
from services.decider.agent.store import AgentStore, LoadedState, RedisAgentStore
from shared.clock import Clock
from shared.contract import AgentTrace
from shared.redis_client import connect_redis
from shared.service import ServiceContext
from shared.settings import Settings

log = logging.getLogger("fleetpilot.decider.agent")


class OllamaAgent:
    """An `Advisor`: one `advise` per decider run, never two at once (a Redis marker catches an overlap)."""

    def __init__(
        self,
        *,
        settings: Settings,
        clock: Clock,
        store: AgentStore,
        registry: CollectorRegistry,
        config: AgentConfig | None = None,
        client: AsyncClient | None = None,
        record_reader: RecordReader | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.store = store
        self.config = config or AgentConfig()
        self.model = settings.ollama_model
        self.client = client or AsyncClient(host=settings.ollama_host, timeout=self.config.call_timeout_s)
        self.registry = registry
        self.metrics = AgentMetrics(registry)
        self.tools_confirmed = False
        self.record_reader = record_reader  # what operators' questions about the past are answered from
        self._owned_redis: Redis | None = None
        self.last_run: AgentRun | None = None  # what the latest run did, for the evaluation suite

    async def aclose(self) -> None:
        await self.client._client.aclose()
        if self._owned_redis is not None:
            await self._owned_redis.aclose()

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        try:
            other = await self.store.claim_run(inputs.run_id, self.config.run_marker_ttl_s)
        except (RedisError, OSError) as error:
            log.warning("agent run marker unavailable (%s); relying on the decider's lock", error)
            other = None
        if other is not None:
            self.metrics.overlapping_runs.inc()
            self.metrics.runs.labels("skipped").inc()
            log.error("agent run %s refused: run %s is still active (two runs at once)", inputs.run_id, other)
            decision = f"another agent run ({other}) was still active; this run did nothing"
            return AdvisorOutcome(trace=AgentTrace(status="skipped", decision=decision), status="ok")
        try:
            state = await self._load_state()
            self.last_run = AgentRun(self, inputs, ports, state)
            return await self.last_run.execute()
        finally:
            try:
                await self.store.release_run(inputs.run_id)
            except (RedisError, OSError) as error:
                log.warning("could not clear the agent run marker (%s); it expires by itself", error)

    async def _load_state(self) -> LoadedState:
        try:
            state = await self.store.load()
        except (RedisError, OSError) as error:
            state = LoadedState(problems=[f"state store unreachable ({type(error).__name__})"])
        if state.problems:
            self.metrics.session_rebuilds.inc()
            log.warning("agent session rebuilt without: %s", "; ".join(state.problems))
        return state

    async def chat(
        self,
        messages: list[Turn],
        schemas: list[dict[str, object]],
        *,
        answer_schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatResponse:
        """One model call; every way it can fail becomes a classified `ModelFailure`. answer_schema: the answer is
        JSON decoded under that schema (Ollama's `format`), with no tools."""
        try:
            async with asyncio.timeout(self.config.call_timeout_s + 1.0):  # backstop over httpx's own timeout
                response = await self.client.chat(
                    model=self.model,
                    messages=[m.wire() for m in messages],
                    tools=schemas or None,
                    stream=False,
                    format=answer_schema,
                    options={
                        "num_ctx": self.config.num_ctx,
                        "temperature": self.config.temperature,
                        "num_predict": max_tokens or self.config.max_output_tokens,
                    },
                )
        except ConnectionError as error:
            raise ModelFailure("unreachable", str(error)[:200]) from None
        except (TimeoutError, httpx.TimeoutException):
            raise ModelFailure("timeout", f"no answer within {self.config.call_timeout_s:.0f} s") from None
        except ResponseError as error:
            raise ModelFailure("error_status", f"HTTP {error.status_code}: {str(error.error)[:200]}") from None
        except httpx.HTTPError as error:
            raise ModelFailure("unreachable", f"{type(error).__name__}: {str(error)[:200]}") from None
        except ValueError as error:  # a body that is not JSON, or JSON that is not a chat response
            raise ModelFailure("malformed", f"{type(error).__name__}: {str(error)[:200]}") from None
        return response

    async def read_instruction(self, text: str, now: datetime) -> Reading:
        """An operator's message read as a limit (reading.py): one call, its answer constrained to the schema."""
        messages = [
            Turn(role="system", kind="system", content=reading_prompt(now)),
            Turn(role="user", kind="observation", content=text),
        ]
        response = await self.chat(
            messages, [], answer_schema=Reading.model_json_schema(), max_tokens=READING_MAX_TOKENS
        )
        try:
            return Reading.model_validate_json(response.message.content or "")
        except ValidationError as error:
            raise ModelFailure("unreadable_answer", f"reading: {str(error)[:160]}") from None

    async def check_tools_capability(self) -> None:
        """The model must support tools; asked once (`/api/show`), then remembered."""
        if self.tools_confirmed:
            return
        try:
            async with asyncio.timeout(self.config.call_timeout_s):
                shown = await self.client.show(self.model)
        except (ConnectionError, TimeoutError, ResponseError, httpx.HTTPError, ValueError) as error:
            raise ModelFailure("unreachable", f"model info unavailable: {type(error).__name__}") from None
        capabilities = list(shown.capabilities or [])
        if capabilities and "tools" not in capabilities:
            raise ModelFailure("no_tools", f"model {self.model} does not support tools (has {capabilities})")
        self.tools_confirmed = True


def create_agent(ctx: ServiceContext, config: AgentConfig | None = None) -> OllamaAgent:
    """The agent as the decider wires it: its registry, its clock, Redis at the configured URL."""
    redis = connect_redis(ctx.settings.redis_url)
    agent = OllamaAgent(
        settings=ctx.settings,
        clock=ctx.clock,
        store=RedisAgentStore(redis, ctx.settings.subject_prefix),
        registry=ctx.metrics.registry,
        config=config,
        record_reader=JetStreamRecordReader(ctx.broker, ctx.subjects),
    )
    agent._owned_redis = redis
    return agent


__all__ = ["AgentRun", "ContextBudgetError", "ModelFailure", "OllamaAgent", "create_agent"]
