"""`fleetpilot`: one entry point; each area adds its commands from its own module."""

from __future__ import annotations

import importlib
import logging

import typer
import uvicorn

from services.cli.ask import ask
from services.cli.asyncapi import asyncapi
from services.cli.bench import bench_app
from services.cli.config import config
from services.cli.demo import demo
from services.cli.ops import audit_app, publish_app, status
from services.cli.sim import sim_app
from shared.settings import Settings

app = typer.Typer(
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


@app.callback()
def main() -> None:
    """FleetPilot: demand, fleet, provisioner, decider and bench services over NATS, plus simulators and tools."""


@app.command("run")
def run_service(
    service: str = typer.Argument(..., help=f"one of: {', '.join(sorted(SERVICES))}"),
    port: int = typer.Option(None, help="HTTP port for /metrics and /health (default: FLEETPILOT_HTTP_PORT)"),
    log_level: str = typer.Option("info", help="debug, info, warning, error"),
) -> None:
    """Run one FleetPilot service in the foreground (configuration from FLEETPILOT_* variables)."""
    if service not in SERVICES:
        raise typer.BadParameter(f"unknown service {service!r}; choose one of {', '.join(sorted(SERVICES))}")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    module = importlib.import_module(SERVICES[service])
    asgi = module.create_app(settings)
    uvicorn.run(asgi, host=settings.http_host, port=port or settings.http_port, log_level=log_level, access_log=False)


# Command groups: each area registers its own typer app here, one line each.
# (keep this block sorted; one `app.add_typer(...)` per line)
app.add_typer(audit_app, name="audit")
app.add_typer(bench_app, name="bench")
app.add_typer(publish_app, name="publish")
app.add_typer(sim_app, name="sim")
app.command("asyncapi")(asyncapi)
app.command("config")(config)
app.command("demo")(demo)
app.command("ask")(ask)
app.command("status")(status)


if __name__ == "__main__":
    app()
