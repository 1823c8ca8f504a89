"""`fleetpilot sim ...`: the simulators (vast.ai, Ollama, the world evaluator)."""

from __future__ import annotations

import typer

sim_app = typer.Typer(help="Simulators: vast.ai API, Ollama stand-in, policy evaluation.", no_args_is_help=True)
