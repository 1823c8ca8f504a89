"""`fleetpilot agent eval`: the agent evaluation suite against the stand-in, the local model or any Ollama host."""

from __future__ import annotations

import asyncio
import json
from enum import StrEnum
from pathlib import Path

import typer

from services.cli.errors import UserMistake, writable_file

agent_app = typer.Typer(help="The LLM agent: evaluation against scenarios with known answers.", no_args_is_help=True)


class Target(StrEnum):
    STANDIN = "standin"
    LOCAL = "local"
    HOST = "host"


@agent_app.command("eval")
def evaluate(
    target: list[Target] = typer.Option(
        None,
        "--target",
        case_sensitive=False,
        help="local (the llama-server model: the default when installed), standin (a wiring check) or host; repeatable",
    ),
    style: list[str] = typer.Option(
        None, "--style", help="prompt styles measured on the same scenarios: full, compact, open (repeatable)"
    ),
    host: str = typer.Option(None, help="Ollama host for --target host (default: FLEETPILOT_OLLAMA_HOST)"),
    model: str = typer.Option(None, help="model for --target host (default: FLEETPILOT_OLLAMA_MODEL)"),
    scenario: list[str] = typer.Option(None, "--scenario", help="run only these scenarios; repeatable"),
    directory: Path = typer.Option(
        None, "--dir", help="the local model's folder (default: FLEETPILOT_LLM_DIR or .llm)"
    ),
    local_model: str = typer.Option(
        "0.5b", "--local-model", help="which local model --target local runs: 0.5b or 1.5b (~2.5x slower)"
    ),
    output: Path = typer.Option(None, "--output", "-o", help="also write the results as JSON here"),
) -> None:
    """Run every scenario through the real agent and guardrails and score the decisions."""
    from evaluation.agent.scenarios import by_name
    from evaluation.agent.suite import TargetKind, run_suite
    from evaluation.llm.runtime import VARIANTS, LocalModelError, LocalModelPaths, default_root, missing_parts
    from shared.settings import Settings

    if any(s not in ("full", "compact", "open") for s in style or []):
        raise UserMistake(f"--style: one of full, compact, open (got {', '.join(style)})")
    out = writable_file(output, "--output")
    try:
        by_name(scenario)
    except ValueError as error:
        raise UserMistake(f"--scenario: {error}") from None
    llm_dir = directory or default_root()
    if local_model not in VARIANTS:
        raise UserMistake(f"--local-model: one of {', '.join(VARIANTS)} (got {local_model!r})")
    paths = LocalModelPaths(llm_dir, VARIANTS[local_model])
    kinds: list[TargetKind] = [t.value for t in target] if target else []
    if not kinds:
        missing = missing_parts(paths)
        kinds = ["standin"] if missing else ["local"]
        if missing:
            typer.echo(
                f"the local model is not installed ({'; '.join(missing)}): running the stand-in, a WIRING CHECK "
                "that scores no model (install the model with `make llm`)",
                err=True,
            )
    if "local" in kinds and (missing := missing_parts(paths)):
        raise UserMistake(
            f"--target local: not installed ({'; '.join(missing)}); run `fleetpilot llm serve --model {local_model}`"
            " once"
        )
    settings = Settings()
    try:
        results = asyncio.run(
            run_suite(
                kinds,
                scenario_names=scenario,
                host=host or settings.ollama_host,
                model=model or settings.ollama_model,
                llm_dir=llm_dir,
                say=typer.echo,
                styles=style or None,  # type: ignore[arg-type]
                local_model=local_model,
            )
        )
    except LocalModelError as error:
        raise UserMistake(f"--target local: {error}") from None
    if out is not None:
        out.write_text(json.dumps(results, indent=2, default=str))
        typer.echo(f"wrote {out}")
