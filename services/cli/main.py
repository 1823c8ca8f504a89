"""`fleetpilot`: one entry point; each area adds its commands from its own module."""

from __future__ import annotations

import importlib
import logging
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version

import typer
import uvicorn

from services.cli.agent_eval import agent_app
from services.cli.ask import ask
from services.cli.asyncapi import asyncapi
from services.cli.bench import bench_app
from services.cli.config import config, load_dotenv_file, refuse_problems
from services.cli.demo import demo
from services.cli.dlq import dlq_app
from services.cli.errors import FleetPilotApp, UserMistake
from services.cli.llm import llm_app
from services.cli.ops import audit_app, publish_app, status
from services.cli.sim import sim_app
from services.cli.streams import streams_app
from services.cli.up import up
from shared.service import ServiceApp
from shared.settings import Settings

app = FleetPilotApp(
    name="fleetpilot",
    help="FleetPilot runs a fleet of rented vast.ai GPU machines by itself.",
    no_args_is_help=True,
    add_completion=False,
)

# service name -> module whose `create_app(settings)` builds its ASGI app
SERVICES = {
    "bench": "services.bench.app",
    "decider": "services.decider.app",
    "demand": "services.demand.app",
    "fleet": "services.fleet.app",
    "provisioner": "services.provisioner.app",
}

# uvicorn waits without limit for HTTP requests in flight at a stop (a slow scrape, a bench upload); 5 s lets a
# scrape finish, and keeps a stop within its supervisor's grace (sim/stack.py: 11 s; Kubernetes: 30 s)
HTTP_STOP_GRACE_S = 5


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def installed_version() -> str:
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


# Command groups: each area registers its own typer app here, one line each.
# (keep this block sorted; one `app.add_typer(...)` per line)
app.add_typer(agent_app, name="agent")
app.add_typer(audit_app, name="audit")
app.add_typer(bench_app, name="bench")
app.add_typer(dlq_app, name="dlq")
app.add_typer(llm_app, name="llm")
app.add_typer(publish_app, name="publish")
app.add_typer(sim_app, name="sim")
app.add_typer(streams_app, name="streams")
app.command("asyncapi")(asyncapi)
app.command("config")(config)
app.command("demo")(demo)
app.command("ask")(ask)
app.command("status")(status)
app.command("up")(up)


if __name__ == "__main__":
    app()
