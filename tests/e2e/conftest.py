"""One fast demo run for the whole session: the demo's own checks and the README's newcomer path share it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.tools import find_tool


@dataclass(frozen=True)
class DemoRun:
    summary: dict[str, Any]
    picture: Path | None
    output: str


@pytest.fixture(scope="session")
def fast_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`make demo ARGS="--fast"` without make (which would reinstall when pyproject.toml is newer)."""
    workdir = tmp_path_factory.mktemp("demo")
    summary_path = workdir / "summary.json"
    picture = workdir / "dashboard.png" if find_tool("prometheus") else None
    command = [sys.executable, "-m", "services.cli.main", "demo", "--fast", "--no-live"]
    command += ["--summary-json", str(summary_path)]
    if picture is not None:
        command += ["--dashboard-png", str(picture)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return DemoRun(json.loads(summary_path.read_text()), picture, run.stdout)
