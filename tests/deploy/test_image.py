"""The Dockerfile, read statically (no Docker engine on the build machines): one small non-root image for all."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def test_every_stage_is_the_same_python_311_slim_by_digest() -> None:
    bases = [args.split()[0] for keyword, args in instructions() if keyword == "FROM"]
    assert len(bases) >= 2, "multi-stage: build in one stage, copy only the environment into the runtime one"
    # one base: the runtime stage runs the venv the build stage made against that stage's Python
    [base] = set(bases)
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base), base


def test_runtime_stage_runs_as_a_non_root_user_with_the_cli_as_entry_point() -> None:
    stage = final_stage()
    users = [args for keyword, args in stage if keyword == "USER"]
    assert users, "no USER in the runtime stage: it would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"0", "root"}
    [entrypoint] = [json.loads(args) for keyword, args in stage if keyword == "ENTRYPOINT"]
    assert entrypoint == ["fleetpilot"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fleetpilot"] == "services.cli.main:app"
    # the runtime stage copies the built environment, not the sources or a compiler
    assert not any(keyword == "RUN" and "pip install" in args for keyword, args in stage)


def test_no_dev_dependencies_and_no_editable_install() -> None:
    installs = [args for keyword, args in instructions() if keyword == "RUN" and "pip install" in args]
    assert installs
    for install in installs:
        assert "[dev]" not in install and " -e " not in f" {install} " and "--editable" not in install


def test_copied_sources_exist_and_pass_the_dockerignore() -> None:
    copied = []
    for keyword, args in instructions():
        if keyword == "COPY" and "--from" not in args:
            *sources, _destination = args.split()
            copied += sources
    assert copied
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    rules = [line for line in ignore if line and not line.startswith("#")]
    assert rules[0] == "**", "the context starts empty and lists what goes in (no .venv, .git, tests, bench-results)"
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    for source in copied:
        assert (REPO / source).exists(), source
        assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"


def test_the_image_installs_the_production_lock_unless_asked() -> None:
    """The production image: the runtime dependencies only, hash-checked; compose asks for the simulators' lock."""
    installs = [args for keyword, args in instructions() if keyword == "RUN" and "pip install" in args]
    [install] = installs
    arguments = {args.split("=")[0]: args.partition("=")[2] for keyword, args in instructions() if keyword == "ARG"}
    assert '--require-hashes -r "${FLEETPILOT_LOCK}"' in install
    assert "pip install --no-deps --no-build-isolation ." in install, "FleetPilot itself adds no unlocked package"
    assert arguments["FLEETPILOT_LOCK"] == "requirements/prod.lock"
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert compose["x-fleetpilot"]["build"]["args"]["FLEETPILOT_LOCK"] == "requirements/sim.lock"
    for lock in ("requirements/prod.lock", "requirements/sim.lock"):
        assert (REPO / lock).is_file(), lock
