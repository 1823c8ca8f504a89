"""`fleetpilot sim ...`: the simulators (vast.ai, Ollama, the world evaluator)."""

from __future__ import annotations

from pathlib import Path

import typer

from services.cli.errors import UserMistake, load_scenario, one_line, writable_file

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


@sim_app.command("vast")
def sim_vast(
    port: int = typer.Option(8200, help="port to listen on"),
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    api_key: str = typer.Option(..., envvar="FLEETPILOT_VAST_API_KEY", help="the key clients must present"),
    scenario: str = typer.Option(None, help="a scenario file (.yaml/.yml/.json); default: the built-in market"),
    speed: float = typer.Option(None, help="simulated time runs this many times faster than wall time"),
    seed: int = typer.Option(None, help="overrides the scenario's seed"),
    log_level: str = typer.Option("info", help="debug, info, warning, error"),
) -> None:
    """A vast.ai REST API stand-in: market, slow and failing machines, rate limits, faults, a ledger (/_sim/ledger)."""
    import time
    from datetime import UTC, datetime

    from shared.clock import Clock, ScaledClock
    from shared.settings import Settings
    from sim.vast.runner import serve_forever
    from sim.vast.scenario import Scenario
    from sim.vast.server import VastSimulator

    world = load_scenario(scenario) if scenario else Scenario()
    if seed is not None:
        world = world.model_copy(update={"seed": seed})
    settings = Settings()
    clock: Clock
    if speed is not None and settings.clock_control_file is None:
        # the demo gives every process the same epoch (FLEETPILOT_CLOCK_*), so they all agree on the time
        epoch = settings.clock_sim_epoch or datetime.now(UTC)
        clock = ScaledClock(epoch, settings.clock_wall_epoch_s or time.time(), speed)
    else:
        clock = settings.make_clock()
    serve_forever(VastSimulator(world, api_key, clock), host=host, port=port, log_level=log_level)


@sim_app.command("traces")
def sim_traces(
    family: str = typer.Option(..., help="the kind of demand (see sim/world/README.md: diurnal, weekly, batch, ...)"),
    seed: int = typer.Option(..., help="draws every parameter of the trace; fit on 100-104, report on 200-209"),
    days: int = typer.Option(3, help="length of the trace in days"),
    out: str = typer.Option(None, help="write the CSV to this file (default: standard output)"),
) -> None:
    """Generate a trace (CSV minute,arrivals) from a family of demand and a seed, for `sim evaluate --trace`."""
    import sys
    from pathlib import Path

    from sim.world.families import generate
    from sim.world.trace import format_trace

    try:
        text = format_trace(generate(family, seed, days))
        if out:
            Path(out).write_text(text)
        else:
            sys.stdout.write(text)
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    except OSError as error:
        typer.echo(f"error: --out {out}: cannot write: {error.strerror or error}", err=True)
        raise typer.Exit(2) from None


@sim_app.command("evaluate")
def sim_evaluate(
    trace: str = typer.Option(..., help="CSV trace with header minute,arrivals (see sim/traces/)"),
    policy: str = typer.Option(
        ...,
        help="predictive (predictive-park: with vast's stop and start); reactive, target-tracking, aws-predictive,"
        " demand-based, vast-serverless; target-tracking-hindsight (a reference: knobs picked from the outcome);"
        " clairvoyant (the bound), clairvoyant-run",
    ),
    scenario: str = typer.Option(None, help="a scenario file (.yaml/.yml/.json), the one sim vast serves"),
    seed: int = typer.Option(None, help="overrides the scenario's seed (market prices and every machine's fate)"),
    json_output: bool = typer.Option(False, "--json", help="print exactly one JSON object"),
    plot: str = typer.Option(None, help="also draw queue, fleet by state and spend over time to this PNG"),
    grace_min: float = typer.Option(None, help="waiting charged only beyond this many minutes (default 15)"),
    delay_usd_per_task_h: float = typer.Option(None, help="charge per task-hour beyond the grace (default 0.10)"),
    initial_machines: int = typer.Option(None, help="machines producing at t=0 (default: sized to the first hour)"),
) -> None:
    """Replay a trace against a simulated fleet under one policy and score it: cost + delay cost."""
    import json
    import sys

    from pydantic import ValidationError

    from sim.world.cli import EvaluateRequest, run_evaluate

    writable_file(Path(plot) if plot else None, "--plot")
    if scenario:
        load_scenario(scenario)  # a bad file is said in one line before the replay starts
    try:
        request = EvaluateRequest(trace, policy, scenario, seed, grace_min, delay_usd_per_task_h, initial_machines)
        evaluation = run_evaluate(request)
    except (ValueError, ValidationError, OSError) as error:
        raise UserMistake(one_line(error)) from None
    if plot:
        from sim.world.report import plot as draw

        draw(evaluation, plot)
    if json_output:
        # the table prints its warnings first; with --json they are in the object and said on stderr as well
        for warning in evaluation.warnings:
            typer.echo(f"warning: {warning}", err=True)
        sys.stdout.write(json.dumps(evaluation.as_dict()) + "\n")
    else:
        from sim.world.report import table

        table(evaluation)
        if plot:
            typer.echo(f"plot: {plot}")
