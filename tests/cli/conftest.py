"""Running the installed `fleetpilot` console script as a user does, in a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

FLEETPILOT = Path(sys.executable).parent / "fleetpilot"

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def cli_environment(**settings: str) -> dict[str, str]:
    """The process environment without any FLEETPILOT_* of the machine's, plus `settings`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FLEETPILOT_")}
    env.update(settings)
    return env


@pytest.fixture
def run_cli(tmp_path: Path) -> RunCli:
    """`run_cli("status", FLEETPILOT_NATS_URL=...)`: the console script in an empty directory (no stray .env)."""

    def run(*args: str, timeout_s: float = 60.0, **settings: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(FLEETPILOT), *args],
            env=cli_environment(**settings),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    return run
