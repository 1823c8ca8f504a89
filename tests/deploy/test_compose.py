"""compose.yaml: valid against the Compose Specification's JSON schema, and wired the way FleetPilot needs.

Checked twice: against the specification's schema (tests/deploy/compose-spec.json, see compose-spec.NOTICE), and
by Compose v2 itself (`docker compose config`, no engine needed), which `.ci/install-compose-v2` installs.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from services.cli.service_apps import SERVICES
from sim.infra import nats_server_binary
from tests.deploy.tools import find_tool

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "compose.yaml"
SCHEMA = json.loads((Path(__file__).parent / "compose-spec.json").read_text())
# `${NAME:-default}`
_DEFAULTED = re.compile(r"^\$\{(?P<name>[A-Z_][A-Z0-9_]*):-(?P<default>[^}]*)\}$")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


def schema_errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_the_schema_is_the_compose_specification() -> None:
    assert SCHEMA["title"] == "Compose Specification"
    assert {"services", "volumes", "networks", "configs", "secrets"} <= set(SCHEMA["properties"])


def test_compose_file_is_valid_against_the_compose_specification() -> None:
    assert schema_errors(compose()) == []


def test_the_schema_check_rejects_a_broken_file() -> None:
    """The validation above can fail: a misspelt key and a wrong type are both reported."""
    broken = copy.deepcopy(compose())
    broken["services"]["demand"]["comand"] = ["run", "demand"]
    broken["services"]["nats"]["volumes"] = "./deploy/nats:/etc/nats:ro"
    errors = schema_errors(broken)
    assert any("comand" in error for error in errors)
    assert any(error.startswith("services/nats/volumes") for error in errors)


# What is looked for, and why there may be none: said whole in the skip, so nobody reads it as "passed".
NO_COMPOSE_V2 = (
    "no Compose v2 here: neither the `docker compose` plugin nor a docker-compose v2 binary is installed "
    "(Debian 12 packages only docker-compose 1.29, Compose v1, which predates the Compose Specification this "
    "file uses: top-level `name`, `depends_on.required`); `.ci/install-compose-v2` puts Debian 13's Compose v2 "
    "into the venv"
)
_COMPOSE_VERSION = re.compile(r"\bv?(\d+)\.\d+\.\d+")


def compose_major_version(command: list[str]) -> int | None:
    probe = subprocess.run([*command, "version"], capture_output=True, text=True, check=False)
    match = _COMPOSE_VERSION.search(probe.stdout) if probe.returncode == 0 else None
    return int(match.group(1)) if match else None


def compose_command() -> list[str] | None:
    """`docker compose` (the plugin) or a `docker-compose` binary, only when it is Compose v2 or later."""
    candidates = []
    if docker := shutil.which("docker"):
        candidates.append([docker, "compose"])
    if binary := find_tool("docker-compose"):
        candidates.append([binary])
    return next((command for command in candidates if (compose_major_version(command) or 0) >= 2), None)


def require_compose_v2() -> list[str]:
    command = compose_command()
    if command is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{NO_COMPOSE_V2}: .ci/run should have installed it")
        pytest.skip(NO_COMPOSE_V2)
    return command


def compose_config(
    command: list[str], compose_file: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`docker compose config` with the one variable compose requires (Grafana's admin password) set."""
    return subprocess.run(
        [*command, "-f", str(compose_file), "--profile", "demo", "config", "-q"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GRAFANA_ADMIN_PASSWORD": "a-password-of-the-operators", **(env or {})},
    )


def test_compose_v2_accepts_the_file() -> None:
    result = compose_config(require_compose_v2(), COMPOSE_FILE)
    assert result.returncode == 0, result.stderr


def test_compose_refuses_to_start_grafana_without_an_admin_password() -> None:
    """No admin/admin default: without GRAFANA_ADMIN_PASSWORD compose stops with one line naming it."""
    command = require_compose_v2()
    env = {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}
    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "--profile", "demo", "config", "-q"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert result.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in result.stderr


def test_compose_v2_rejects_a_broken_file(tmp_path: Path) -> None:
    """The check above can fail: Compose v2 refuses a service whose dependency does not exist."""
    broken = copy.deepcopy(compose())
    broken["services"]["demand"]["depends_on"]["no-such-service"] = {"condition": "service_started"}
    broken_file = tmp_path / "compose.yaml"
    broken_file.write_text(yaml.safe_dump(broken))
    result = compose_config(require_compose_v2(), broken_file)
    assert result.returncode != 0 and "no-such-service" in result.stderr


@pytest.mark.parametrize(
    ("printed", "major"),
    [
        ("Docker Compose version v2.29.7", 2),
        ("Docker Compose version 2.20.2+ds1-0ubuntu1~22.04.1", 2),
        ("docker-compose version 1.29.2, build unknown", 1),
    ],
)
def test_compose_versions_are_read_from_what_each_release_prints(printed: str, major: int) -> None:
    match = _COMPOSE_VERSION.search(printed)
    assert match and int(match.group(1)) == major


def test_every_service_runs_with_its_own_nats_user() -> None:
    services = compose()["services"]
    nats_env = services["nats"]["environment"]
    for name in SERVICES:
        service = services[name]
        assert service["command"] == ["run", name]
        assert "profiles" not in service, f"{name} must run without a profile"
        env = service["environment"]
        assert env["FLEETPILOT_NATS_USER"] == name
        # the service and the server read the same variable, with the same development default
        variable = f"{name.upper()}_PASSWORD"
        assert env["FLEETPILOT_NATS_PASSWORD"] == nats_env[variable] == f"${{{variable}:-p{name}-dev}}"
        assert env["FLEETPILOT_NATS_URL"] == "nats://nats:4222"
        assert service["user"] == "10001:10001" and service["read_only"] is True
        assert service["depends_on"]["nats"]["condition"] == "service_healthy"


def test_demo_profile_runs_the_simulators_and_services_point_at_them_by_default() -> None:
    services = compose()["services"]
    assert services["vast-sim"]["profiles"] == ["demo"]
    assert services["vast-sim"]["command"][:2] == ["sim", "vast"]
    assert services["ollama-sim"]["profiles"] == ["demo"]
    assert services["ollama-sim"]["command"][:2] == ["sim", "ollama"]
    env = services["provisioner"]["environment"]
    assert env["FLEETPILOT_VAST_API_URL"] == "${FLEETPILOT_VAST_API_URL:-http://vast-sim:8080}"
    assert env["FLEETPILOT_OLLAMA_HOST"] == "${FLEETPILOT_OLLAMA_HOST:-http://ollama-sim:11434}"
    assert "8080" in services["vast-sim"]["command"] and "11434" in services["ollama-sim"]["command"]
    jobs = services["jobs-sim"]
    assert jobs["profiles"] == ["demo"] and jobs["entrypoint"] == ["python", "-m", "sim.jobs"]
    assert jobs["environment"]["FLEETPILOT_NATS_USER"] == "jobs"
    trace = jobs["command"][jobs["command"].index("--trace") + 1]
    assert (REPO / "sim" / "traces" / Path(trace).name).exists() and "/site-packages/sim/traces/" in trace
    for infrastructure in ("nats", "redis", "prometheus", "grafana"):
        assert infrastructure in services and "profiles" not in services[infrastructure]


def test_nats_in_compose_starts_on_its_config_with_the_default_passwords(tmp_path: Path) -> None:
    """The server compose runs: deploy/nats/nats.conf, which includes the permissions, with compose's defaults."""
    nats = compose()["services"]["nats"]
    assert nats["command"] == ["-c", "/etc/nats/nats.conf"]
    assert "./deploy/nats:/etc/nats:ro" in nats["volumes"]
    env = {}
    for variable, value in nats["environment"].items():
        match = _DEFAULTED.match(value)
        assert match and match["name"] == variable, value
        env[variable] = match["default"]
    result = subprocess.run(
        [nats_server_binary(), "-c", str(REPO / "deploy" / "nats" / "nats.conf"), "-t"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
