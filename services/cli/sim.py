"""`fleetpilot sim ...`: the simulators (vast.ai, Ollama, the world evaluator)."""

from __future__ import annotations

import typer

sim_app = typer.Typer(help="Simulators: vast.ai API, Ollama stand-in, policy evaluation.", no_args_is_help=True)


@sim_app.command("openai")
def sim_openai(
    port: int = typer.Option(8100, help="port to listen on"),
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    model: str = typer.Option("standin-model", help="the model name /v1/models lists"),
    tokens_per_s: float = typer.Option(50.0, help="decode rate of each stream"),
    ttft_s: float = typer.Option(0.1, help="time to first token (prefill and scheduling)"),
    prefill_tokens_per_s: float = typer.Option(None, help="adds prompt tokens / this rate to the TTFT"),
    max_batch: int = typer.Option(None, help="streams decoding at once; the others queue"),
    max_tokens_per_s: float = typer.Option(None, help="cap on the sum of all streams' rates"),
    tokens_per_chunk: int = typer.Option(1, help="tokens per streamed chunk (>1 mimics speculative decoding)"),
) -> None:
    """An OpenAI-compatible streaming server with a known speed, to check `fleetpilot bench serving` against."""
    from sim.openai.server import StandInConfig, serve

    config = StandInConfig(
        model=model,
        tokens_per_s=tokens_per_s,
        ttft_s=ttft_s,
        prefill_tokens_per_s=prefill_tokens_per_s,
        max_batch=max_batch,
        max_tokens_per_s=max_tokens_per_s,
        tokens_per_chunk=tokens_per_chunk,
    )
    serve(config, host, port)


@sim_app.command("ollama")
def sim_ollama(
    port: int = typer.Option(11434, help="port to listen on"),
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    behaviour: str = typer.Option("follow", help="scripted model behaviour (see sim/ollama/behaviours.py)"),
    model: str = typer.Option(None, help="the model name it serves (default qwen3:8b)"),
) -> None:
    """A protocol-level Ollama (/api/chat, /api/tags, /api/show) with scripted model behaviours."""
    from sim.ollama.behaviours import ALL_BEHAVIOURS
    from sim.ollama.server import serve

    if behaviour not in ALL_BEHAVIOURS:
        raise typer.BadParameter(f"unknown behaviour {behaviour!r}; choose one of {', '.join(ALL_BEHAVIOURS)}")
    serve(port=port, host=host, behaviour=behaviour, model=model)
