"""Where the evaluation's model comes from: the Ollama stand-in (in-process), the local llama-server model
(started for the run), or any Ollama host already running. Each yields an `EvalTarget` while it is up."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from evaluation.agent.runner import EvalTarget
from evaluation.llm.runtime import DEFAULT_VARIANT, VARIANTS, LocalModel, LocalModelPaths
from sim.ollama.server import OllamaStandIn

STANDIN_BEHAVIOUR = "follow"  # carries out the policy recommendation the agent is shown, and answers operators


@contextlib.asynccontextmanager
async def standin_target() -> AsyncIterator[EvalTarget]:
    async with OllamaStandIn(behaviour=STANDIN_BEHAVIOUR) as standin:
        yield EvalTarget(host=standin.url, model=standin.state.model, label=f"stand-in ({STANDIN_BEHAVIOUR})")


@contextlib.asynccontextmanager
async def local_target(root: Path, threads: int = 1, variant: str = DEFAULT_VARIANT) -> AsyncIterator[EvalTarget]:
    card = VARIANTS[variant].card
    async with LocalModel(LocalModelPaths(root, VARIANTS[variant]), threads=threads) as model:
        yield EvalTarget(host=model.ollama_host, model=card.name, label=f"{card.name} (llama-server)")


@contextlib.asynccontextmanager
async def host_target(host: str, model: str) -> AsyncIterator[EvalTarget]:
    yield EvalTarget(host=host, model=model, label=f"{model} at {host}")
