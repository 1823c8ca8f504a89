"""The evaluation as one call for the CLI (`fleetpilot agent eval`) and the benchmark
(`python -m benchmarks.agent_eval`): each target in turn, a table per target, one JSON document for all."""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from evaluation.agent.instructions import (
    InstructionScenario,
    evaluate_instructions,
    instruction_table,
    score_instruction,
)
from evaluation.agent.instructions import load as load_instructions
from evaluation.agent.runner import EvalTarget, evaluate, record_json, run_line, summary_table
from evaluation.agent.scenarios import EvalScenario, by_name
from evaluation.agent.targets import host_target, local_target, standin_target
from evaluation.llm.runtime import DEFAULT_VARIANT
from services.decider.agent.config import AgentConfig

TargetKind = Literal["standin", "local", "host"]
PromptStyle = Literal["full", "compact", "open"]
# a 0.5B model on two shared cores reads a 3k-token prompt in 20-60 s; the agent's default (60 s, sized for an
# 8B model on a GPU) would turn slowness into fallbacks, which is not what the suite measures
LOCAL_CALL_TIMEOUT_S = 300.0
# ~40 s of writing at 10 tokens/s: room for the three-part answer or a few calls, not for a loop
LOCAL_MAX_OUTPUT_TOKENS = 384

Say = Callable[[str], None]


def target_context(
    kind: TargetKind, *, host: str, model: str, llm_dir: Path, local_model: str = DEFAULT_VARIANT
) -> contextlib.AbstractAsyncContextManager[EvalTarget]:
    if kind == "standin":
        return standin_target()
    if kind == "local":
        return local_target(llm_dir, variant=local_model)
    return host_target(host, model)


def config_for(kind: TargetKind) -> AgentConfig:
    """The agent's configuration from FLEETPILOT_AGENT_* as in production; the local 0.5B model gets the
    settings it is deployed with (a longer call timeout, the compact prompt) unless the environment says."""
    config = AgentConfig()
    if kind == "local" and "FLEETPILOT_AGENT_CALL_TIMEOUT_S" not in os.environ:
        config = config.model_copy(update={"call_timeout_s": LOCAL_CALL_TIMEOUT_S})
    if kind == "local" and "FLEETPILOT_AGENT_PROMPT_STYLE" not in os.environ:
        config = config.model_copy(update={"prompt_style": "compact"})
    if kind == "local" and "FLEETPILOT_AGENT_MAX_OUTPUT_TOKENS" not in os.environ:
        config = config.model_copy(update={"max_output_tokens": LOCAL_MAX_OUTPUT_TOKENS})
    return config


async def run_suite(
    kinds: list[TargetKind],
    *,
    scenario_names: list[str] | None,
    host: str,
    model: str,
    llm_dir: Path,
    say: Say,
    styles: list[PromptStyle] | None = None,
    with_instructions: bool = True,
    instruction_names: list[str] | None = None,
    local_model: str = DEFAULT_VARIANT,
) -> dict[str, Any]:
    """styles: the prompt styles to measure on the same scenarios (default: the target's configured one)."""
    scenarios = by_name(scenario_names)
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "scenarios": len(scenarios),
        "targets": {},
    }
    instructions = load_instructions(names=instruction_names) if with_instructions else []
    results["instructions"] = len(instructions)
    for kind in kinds:
        base = config_for(kind)
        entries: dict[str, Any] = {}
        async with target_context(kind, host=host, model=model, llm_dir=llm_dir, local_model=local_model) as target:
            if kind == "standin":
                say(
                    "NOTE: the stand-in (`follow`) makes the recommended calls it parses from the prompt: a wiring "
                    "check of the agent, not an evaluation of a model"
                )
            for style in styles or [base.prompt_style]:
                config = base.model_copy(update={"prompt_style": style})
                entries[style] = await _one_style(target, config, scenarios, instructions, say)
        first = next(iter(entries.values()))
        results["targets"][kind] = {**first, "styles": entries}
    return results


async def _one_style(
    target: EvalTarget,
    config: AgentConfig,
    scenarios: list[EvalScenario],
    instructions: list[InstructionScenario],
    say: Say,
) -> dict[str, Any]:
    style = config.prompt_style
    say(f"-- {target.label}: {len(scenarios)} scenarios (token budget {config.token_budget}, {style} prompt)")
    records, summary = await evaluate(scenarios, target, config, lambda r: say(run_line(r)))
    say(summary_table(f"{target.label}, {config.prompt_style}", summary))
    entry: dict[str, Any] = {
        "label": target.label,
        "model": target.model,
        "config": {
            "token_budget": config.token_budget,
            "call_timeout_s": config.call_timeout_s,
            "max_rounds": config.max_rounds,
            "temperature": config.temperature,
            "prompt_style": config.prompt_style,
            "max_output_tokens": config.max_output_tokens,
        },
        "summary": asdict(summary),
        "runs": [record_json(record) for record in records],
    }
    if instructions:
        outcomes, told = await evaluate_instructions(instructions, target, config)
        say(instruction_table(f"{target.label}, {config.prompt_style}", told))
        entry["instructions"] = {
            "summary": asdict(told),
            "runs": [
                {"scenario": s.name, "kind": s.kind, **asdict(score_instruction(s, o)), "reply": o.reply[:400]}
                for s, o in zip(instructions, outcomes, strict=True)
            ],
        }
    return entry


def target_summary(results: dict[str, Any], kind: TargetKind) -> dict[str, Any] | None:
    entry = results["targets"].get(kind)
    return None if entry is None else dict(entry["summary"])


__all__ = ["EvalTarget", "TargetKind", "run_suite", "target_summary"]
