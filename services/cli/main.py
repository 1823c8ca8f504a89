"""`fleetpilot`: one entry point; each area adds its commands from its own module."""

from __future__ import annotations

import importlib
import logging
from enum import StrEnum

import typer

from services.cli.errors import FleetPilotApp, UserMistake
from services.cli.lazy import LazyGroup, LazyTarget
from services.cli.service_apps import SERVICES

# Command groups and commands, each from its own module, imported only when used (services/cli/lazy.py); the
# help beside each is what `fleetpilot --help` lists (a test keeps it equal to the command's own). Sorted.
LAZY_COMMANDS = {
    "agent": LazyTarget(
        "services.cli.agent_eval:agent_app",
        "The LLM agent: evaluation against scenarios with known answers.",
    ),
    "ask": LazyTarget(
        "services.cli.ask:ask",
        "Ask the fleet agent a question; it answers from the audit trail and the current state, and acts on nothing.",
    ),
    "asyncapi": LazyTarget(
        "services.cli.asyncapi:asyncapi",
        "Write the AsyncAPI document of every subject (the browsable contract).",
    ),
    "audit": LazyTarget("services.cli.ops:audit_app", "Read the decision audit trail."),
    "bench": LazyTarget(
        "services.cli.bench:bench_app",
        "Benchmarks: the GPU suite on this machine, serving sweeps against an endpoint.",
    ),
    "config": LazyTarget(
        "services.cli.config:config",
        "Print every setting: environment variable, default and meaning (markdown).",
    ),
    "cost": LazyTarget(
        "services.cli.cost:cost",
        "What vast.ai charged: today (or the last --days), GPU, storage and bandwidth apart, per model and machine.",
    ),
    "demo": LazyTarget(
        "services.cli.demo:demo",
        "Run the whole system on simulated vast.ai and Ollama: a day of demand in a few minutes.",
    ),
    "directives": LazyTarget(
        "services.cli.directives:directives_app",
        "The operator's directives to the decider: list them, add one, revoke one.",
    ),
    "dlq": LazyTarget("services.cli.dlq:dlq_app", "Dead letters: messages a service rejected, with the reason."),
    "history": LazyTarget(
        "services.cli.history:history",
        "One machine's story: its states, the commands sent or refused for it, the provisioner's answers, its bench.",
    ),
    "llm": LazyTarget(
        "services.cli.llm:llm_app",
        "A local language model (llama-server + an Ollama-compatible adapter).",
    ),
    "publish": LazyTarget(
        "services.cli.ops:publish_app",
        "Publish job-system events to FleetPilot (what a job system does; handy for testing).",
    ),
    "sim": LazyTarget("services.cli.sim:sim_app", "Simulators: vast.ai API, Ollama stand-in, policy evaluation."),
    "status": LazyTarget(
        "services.cli.ops:status",
        "Show the fleet: every instance with its state, GPU, price, age and throughput (asks the fleet service).",
    ),
    "streams": LazyTarget("services.cli.streams:streams_app", "The JetStream streams FleetPilot's services bind to."),
    "up": LazyTarget(
        "services.cli.up:up",
        "Start NATS, Redis, the vast.ai and Ollama stand-ins and every service locally; Ctrl-C stops them all.",
    ),
}


class FleetPilotCommands(LazyGroup):
    lazy_commands = LAZY_COMMANDS


app = FleetPilotApp(
    name="fleetpilot",
    cls=FleetPilotCommands,
    help="FleetPilot runs a fleet of rented vast.ai GPU machines by itself.",
    no_args_is_help=True,
    add_completion=False,
)


# uvicorn waits without limit for HTTP requests in flight at a stop (a slow scrape, a bench upload); 5 s lets a
# scrape finish, and keeps a stop within its supervisor's grace (sim/stack.py: 11 s; Kubernetes: 30 s)
HTTP_STOP_GRACE_S = 5


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fleetpilot")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"fleetpilot {installed_version()}")
        raise typer.Exit(0)


@app.callback()
def main(
    show_version: bool = typer.Option(
        False, "--version", callback=print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """FleetPilot: demand, fleet, provisioner, decider and bench services over NATS, plus simulators and tools.

    Settings come from FLEETPILOT_* environment variables, and from a `.env` file in the current directory
    for those the environment does not set."""
    from services.cli.config import load_dotenv_file

    load_dotenv_file()


@app.command("run")
def run_service(
    service: str = typer.Argument(..., help=f"one of: {', '.join(sorted(SERVICES))}"),
    port: int = typer.Option(None, help="HTTP port for /metrics and /health (default: FLEETPILOT_HTTP_PORT)"),
    log_level: LogLevel = typer.Option(LogLevel.INFO, case_sensitive=False, help="how much to log"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="provisioner only: read vast.ai for real, log each create/stop/destroy, send none"
    ),
) -> None:
    """Run one FleetPilot service in the foreground (configuration from FLEETPILOT_* variables)."""
    if service not in SERVICES:
        raise typer.BadParameter(f"unknown service {service!r}; choose one of {', '.join(sorted(SERVICES))}")
    if dry_run and service != "provisioner":
        raise UserMistake(f"--dry-run: only the provisioner calls vast.ai; {service} has nothing to dry-run")
    import uvicorn

    from services.cli.config import refuse_problems
    from shared.service import ServiceApp
    from shared.settings import Settings

    refuse_problems()  # a typo'd variable or contradicting caps: refused before the service acts on them
    level = log_level.value
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    module = importlib.import_module(SERVICES[service])
    asgi = module.create_app(settings, dry_run=True) if dry_run else module.create_app(settings)
    config = uvicorn.Config(
        asgi,
        host=settings.http_host,
        port=port or settings.http_port,
        log_level=level,
        access_log=False,
        timeout_graceful_shutdown=HTTP_STOP_GRACE_S,
    )
    server = uvicorn.Server(config)
    if isinstance(asgi, ServiceApp):
        asgi.stop_process = lambda: setattr(server, "should_exit", True)
    server.run()
    if isinstance(asgi, ServiceApp) and asgi.fatal_error is not None:
        raise typer.Exit(1)  # the log says why; a supervisor restarts the service


if __name__ == "__main__":
    app()
