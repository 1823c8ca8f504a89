"""Where the evaluation's model comes from: the Ollama stand-in (in-process), the local llama-server model
(started for the run), or any Ollama host already running. Each yields an `EvalTarget` while it is up."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from evaluation.agent.runner import EvalTarget
from evaluation.llm.runtime import MODEL_CARD, LocalModel, LocalModelPaths
from sim.ollama.server import OllamaStandIn

STANDIN_BEHAVIOUR = "follow"  # carries out the policy recommendation the agent is shown, and answers operators


@contextlib.asynccontextmanager
async def standin_target() -> AsyncIterator[EvalTarget]:
    async with OllamaStandIn(behaviour=STANDIN_BEHAVIOUR) as standin:
        yield EvalTarget(host=standin.url, model=standin.state.model, label=f"stand-in ({STANDIN_BEHAVIOUR})")


@contextlib.asynccontextmanager
async def local_target(root: Path, threads: int = 1) -> AsyncIterator[EvalTarget]:
    async with LocalModel(LocalModelPaths(root), threads=threads) as model:
        yield EvalTarget(host=model.ollama_host, model=MODEL_CARD.name, label=f"{MODEL_CARD.name} (llama-server)")


@contextlib.asynccontextmanager
async def host_target(host: str, model: str) -> AsyncIterator[EvalTarget]:
    yield EvalTarget(host=host, model=model, label=f"{model} at {host}")
