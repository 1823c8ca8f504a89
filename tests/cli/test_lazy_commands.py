"""`fleetpilot --help` and `--version` import no command's module (they answered in 1.8-2.6 s when every module
was imported first; the time itself is measured in benchmarks/cli_start.py), and each command's help as listed
is its own."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main
from typer._click import Context

from services.cli.main import LAZY_COMMANDS, FleetPilotCommands, app

# what a command's module brings in; none is needed to list the commands or print the version
HEAVY_MODULES = ("nats", "uvicorn", "pydantic_settings", "shared.contract", "sim.stack", "faststream")
PROBE = """
import sys
from services.cli.main import app
try:
    app({args!r})
except SystemExit:
    pass
print("imported:", ",".join(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"]], ids=" ".join)
def test_listing_the_commands_or_the_version_imports_none_of_them(args: list[str]) -> None:
    probe = PROBE.format(args=args, heavy=HEAVY_MODULES)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "imported: ", done.stdout


def test_each_listed_help_is_the_commands_own() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, FleetPilotCommands)
    context = Context(group)
    for name, target in LAZY_COMMANDS.items():
        command = target.load(name)
        assert command.get_short_help_str(limit=300) == target.short_help, name
        assert group.get_command(context, name) is not None
