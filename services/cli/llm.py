"""`fleetpilot llm serve`: a small real model behind an Ollama-compatible API, on this machine, without Ollama."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.cli.errors import UserMistake

if TYPE_CHECKING:
    from evaluation.llm.runtime import LocalModelPaths

llm_app = typer.Typer(
    help="A local language model (llama-server + an Ollama-compatible adapter).", no_args_is_help=True
)


async def _serve_until_stopped(paths: LocalModelPaths, port: int | None, threads: int, context_tokens: int) -> None:
    from evaluation.llm.runtime import LocalModel

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    model = LocalModel(paths, adapter_port=port, threads=threads, context_tokens=context_tokens)
    async with model:
        card = model.card()
        typer.echo(f"llama-server on {model.upstream_url} (log: {model.log_path})")
        typer.echo(f"Ollama host: {model.ollama_host}   model: {card.name}")
        typer.echo(f"  export FLEETPILOT_OLLAMA_HOST={model.ollama_host} FLEETPILOT_OLLAMA_MODEL={card.name}")
        typer.echo("Ctrl-C stops both.")
        await stop.wait()
        typer.echo("stopping llama-server and the adapter")


@llm_app.command("serve")
def serve(
    port: int = typer.Option(None, help="the adapter's port (default: a free one)"),
    threads: int = typer.Option(1, min=1, help="llama-server's CPU threads (more only on an otherwise idle machine)"),
    context_tokens: int = typer.Option(16384, min=2048, help="llama-server's context size (-c)"),
    directory: Path = typer.Option(
        None, "--dir", help="where the build and the model are cached (default: FLEETPILOT_LLM_DIR or .llm)"
    ),
    install_only: bool = typer.Option(False, "--install-only", help="build and assemble, then exit"),
    model: str = typer.Option("0.5b", "--model", help="0.5b (the default) or 1.5b (~2.5x slower, 1.1 GB)"),
) -> None:
    """Build llama-server and assemble the model once (reused afterwards), then serve it until Ctrl-C."""
    from evaluation.llm.runtime import VARIANTS, LocalModelError, LocalModelPaths, default_root, install

    if model not in VARIANTS:
        raise UserMistake(f"--model: one of {', '.join(VARIANTS)} (got {model!r})")
    root = directory or default_root()
    paths = LocalModelPaths(root, VARIANTS[model])
    try:
        install(paths, lambda line: typer.echo(f"llm: {line}"))
        if install_only:
            typer.echo(f"llm: {model} installed under {root}")
            return
        asyncio.run(_serve_until_stopped(paths, port, threads, context_tokens))
    except LocalModelError as error:
        raise UserMistake(f"fleetpilot llm: {error}") from None
    except OSError as error:
        raise UserMistake(f"fleetpilot llm: {error}") from None
