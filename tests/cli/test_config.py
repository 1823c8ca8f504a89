"""`fleetpilot config`: every setting described, the values in force with their source, and `--check`."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.cli.config import SETTINGS_CLASSES, load_class, markdown_reference, reference_rows
from services.provisioner import vast_client
from services.provisioner.settings import (
    DOCUMENTED_RATE_LIMITED_WAIT_S,
    DOCUMENTED_SPACING_S,
    ENDPOINTS,
    ProvisionerSettings,
)
from tests.cli.conftest import RunCli
from tests.cli.test_mistakes import assert_one_clear_line


def test_every_setting_has_a_description() -> None:
    undescribed = [env for _, env, _, description in reference_rows() if not description.strip()]
    assert not undescribed, f"settings without a description (Field(description=...)): {undescribed}"


def test_every_settings_class_is_listed() -> None:
    """A new settings class must be added to SETTINGS_CLASSES, or `config` (and its checks) would miss it."""
    import pkgutil

    from pydantic_settings import BaseSettings

    import services

    listed = {load_class(spec) for _, spec in SETTINGS_CLASSES}
    found = set()
    for module in pkgutil.walk_packages(services.__path__, "services."):
        if module.name.rsplit(".", 1)[-1] in ("config", "settings"):
            namespace = __import__(module.name, fromlist=["*"])
            found |= {
                value
                for value in vars(namespace).values()
                if isinstance(value, type) and issubclass(value, BaseSettings) and value.__module__ == module.name
            }
    assert found <= listed, f"not in SETTINGS_CLASSES: {sorted(c.__name__ for c in found - listed)}"


def test_no_number_setting_takes_infinity_or_nan() -> None:
    """inf passes gt=0: a heartbeat of inf stopped every decision, a budget of inf switched the budget off."""
    accepted = []
    for _, spec in SETTINGS_CLASSES:
        settings_class = load_class(spec)
        for name, field in settings_class.model_fields.items():
            if "float" not in str(field.annotation):
                continue
            for bad in (math.inf, -math.inf, math.nan):
                value = {"search": bad} if "dict" in str(field.annotation) else bad
                try:
                    settings_class(**{name: value})
                except ValidationError:
                    continue
                accepted.append(f"{settings_class.__name__}.{name}={bad}")
    assert accepted == []


def test_one_endpoints_spacing_keeps_the_others_documented() -> None:
    spaced = ProvisionerSettings(spacing_s={"search": 10.0, "invoices": 2.0})
    assert spaced.spacing_s == {**DOCUMENTED_SPACING_S, "search": 10.0, "invoices": 2.0}
    # every endpoint the client spaces by name may be set (the invoices query has no documented limit)
    called = set(re.findall(r'_call\(\s*"(\w+)"', Path(vast_client.__file__).read_text()))
    assert called == ENDPOINTS
    assert ProvisionerSettings().rate_limited_wait_s == DOCUMENTED_RATE_LIMITED_WAIT_S


def test_windows_and_levels_are_comma_separated_or_json(run_cli: RunCli) -> None:
    done = run_cli(
        "config", "--effective", FLEETPILOT_DEMAND_WINDOWS_S="900,3600", FLEETPILOT_BENCH_SERVING_LEVELS="[1, 4]"
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("FLEET")}
    assert rows["FLEETPILOT_DEMAND_WINDOWS_S"] == "900, 3600  (env)"
    assert rows["FLEETPILOT_BENCH_SERVING_LEVELS"] == "1, 4  (env)"


def test_effective_values_say_where_each_came_from(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("FLEETPILOT_MAX_INSTANCES=7\nFLEETPILOT_BUDGET_USD_PER_H=3\n")
    done = run_cli("config", "--effective", FLEETPILOT_BUDGET_USD_PER_H="5", FLEETPILOT_VAST_API_KEY="hunter2")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("FLEET")}
    assert rows["FLEETPILOT_BUDGET_USD_PER_H"] == "5.0  (env)"  # the environment wins over .env
    assert rows["FLEETPILOT_MAX_INSTANCES"] == "7  (.env)"
    assert rows["FLEETPILOT_DECIDER_MODE"] == "shadow  (default)"
    assert rows["FLEETPILOT_VAST_API_KEY"] == "(secret, set)  (env)" and "hunter2" not in done.stdout


def test_check_passes_a_valid_configuration_and_names_a_bad_value(run_cli: RunCli, tmp_path: Path) -> None:
    good = run_cli("config", "--check")
    assert good.returncode == 0 and good.stdout.startswith("configuration OK"), good.stderr
    (tmp_path / ".env").write_text("FLEETPILOT_FLEET_TICK_S=soon\n")
    bad = run_cli("config", "--check")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: FLEETPILOT_FLEET_TICK_S='soon': input should be a valid number, unable to parse string as a number"
    ]


def test_an_unknown_variable_names_the_closest_known_one(run_cli: RunCli) -> None:
    for command in (["config", "--check"], ["run", "demand"]):  # the service refuses it before it starts
        done = run_cli(*command, FLEETPILOT_BUDGET_USD_PERH="3")
        line = assert_one_clear_line(done, "FLEETPILOT_BUDGET_USD_PERH")
        assert line.endswith("did you mean FLEETPILOT_BUDGET_USD_PER_H?"), line


def test_a_list_setting_is_comma_separated(run_cli: RunCli) -> None:
    done = run_cli("config", "--effective", FLEETPILOT_PROVISIONER_ALLOWED_GPU_MODELS="RTX 4090, RTX 5090")
    assert done.returncode == 0, done.stderr
    [row] = [line for line in done.stdout.splitlines() if line.startswith("FLEETPILOT_PROVISIONER_ALLOWED_GPU")]
    assert row.split(None, 1)[1] == "RTX 4090, RTX 5090  (env)"


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("FLEETPILOT_PROVISIONER_WORKER_PORTS", "8000,http", "input should be a valid integer"),
        ("FLEETPILOT_PROVISIONER_SPACING_S", "{search: 6}", "expected a JSON object"),
    ],
)
def test_an_unreadable_list_or_mapping_is_one_line(run_cli: RunCli, variable: str, value: str, named: str) -> None:
    assert_one_clear_line(run_cli("config", "--check", **{variable: value}), variable, named)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"FLEETPILOT_MAX_INSTANCES": "0"}, ["FLEETPILOT_MAX_INSTANCES", "greater than or equal to 1"]),
        ({"FLEETPILOT_NORMAL_MAX_PRICE_USD_PER_H": "1.5"}, ["FLEETPILOT_EMERGENCY_MAX_PRICE_USD_PER_H=1.2"]),
        ({"FLEETPILOT_BUDGET_USD_PER_H": "1"}, ["FLEETPILOT_EMERGENCY_MAX_PRICE_USD_PER_H=1.2", "budget"]),
        ({"FLEETPILOT_PROVISIONER_ALLOWED_GPU_MODELS": "RTX 4090,GTX 1080"}, ["'GTX 1080'", "RTX 5090"]),
        ({"FLEETPILOT_DECIDER_HEARTBEAT_S": "inf"}, ["FLEETPILOT_DECIDER_HEARTBEAT_S='inf'", "finite number"]),
        ({"FLEETPILOT_BUDGET_USD_PER_H": "inf"}, ["FLEETPILOT_BUDGET_USD_PER_H='inf'", "finite number"]),
        ({"FLEETPILOT_PROVISIONER_LEASE_TTL_S": "0.0005"}, ["LEASE_TTL_S='0.0005'", "greater than or equal to 1"]),
        ({"FLEETPILOT_PROVISIONER_ALLOWED_GPU_MODELS": ""}, ["ALLOWED_GPU_MODELS", "empty", "leave the variable"]),
        ({"FLEETPILOT_DECIDER_MAX_LAUNCHES_PER_H": "0"}, ["MAX_LAUNCHES_PER_H='0'", "greater than or equal to 1"]),
        (
            {"FLEETPILOT_DECIDER_MIN_PRODUCERS_WHILE_QUEUED": "10", "FLEETPILOT_MAX_INSTANCES": "4"},
            ["MIN_PRODUCERS_WHILE_QUEUED=10 is above FLEETPILOT_MAX_INSTANCES=4"],
        ),
        ({"FLEETPILOT_PROVISIONER_SPACING_S": '{"craete": 9}'}, ["SPACING_S", "no endpoint 'craete'", "create"]),
        ({"FLEETPILOT_PROVISIONER_SPACING_S": '{"destroy": -5}'}, ["SPACING_S", "a negative wait for 'destroy'"]),
        ({"FLEETPILOT_REDIS_URL": "localhost:6379"}, ["FLEETPILOT_REDIS_URL='localhost:6379'", "redis://"]),
        ({"FLEETPILOT_VAST_API_URL": "console.vast.ai"}, ["FLEETPILOT_VAST_API_URL", "https://"]),
        ({"FLEETPILOT_DECIDER_ADVISOR": "no.such.module:factory"}, ["ADVISOR", "no module 'no.such.module'"]),
        (
            {"FLEETPILOT_BENCH_FAIL_BELOW_SHARE": "0.9"},
            ["FLEETPILOT_BENCH_FAIL_BELOW_SHARE=0.9 is above FLEETPILOT_BENCH_DEGRADED_BELOW_SHARE=0.8"],
        ),
    ],
    ids=[
        "no instances",
        "normal above emergency",
        "cap above budget",
        "unknown GPU",
        "endless heartbeat",
        "endless budget",
        "lease shorter than a millisecond",
        "no GPU allowed",
        "no launch per hour",
        "more producers kept than instances",
        "a misspelt endpoint",
        "a negative spacing",
        "redis without its scheme",
        "vast without its scheme",
        "an advisor that is not there",
        "fail above degraded",
    ],
)
def test_settings_that_contradict_each_other_are_refused(
    run_cli: RunCli, settings: dict[str, str], named: list[str]
) -> None:
    assert_one_clear_line(run_cli("config", "--check", **settings), *named)


def test_the_stack_env_file_lets_config_show_what_the_stack_enforces(run_cli: RunCli, tmp_path: Path) -> None:
    from services.cli.up import client_environment
    from sim.stack import Stack, StackPlan

    exported = client_environment(Stack(StackPlan.fast(), tmp_path))
    done = run_cli("config", "--effective", **exported)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("FLEET")}
    # the stand-in's hosts report CUDA 12.4: the stack lowers the provisioner's floor, and config must say so
    assert rows["FLEETPILOT_PROVISIONER_MIN_CUDA"] == "12.4  (env)"
    assert rows["FLEETPILOT_BUDGET_USD_PER_H"] == f"{StackPlan.fast().budget_usd_per_h}  (env)"


def test_the_readmes_configuration_reference_is_what_fleetpilot_config_prints() -> None:
    # the README's table is pasted from `fleetpilot config`; a setting added or reworded since shows up here
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    printed = [line for line in markdown_reference().splitlines() if line.startswith("| `FLEETPILOT_")]
    pasted = [line for line in readme.splitlines() if line.startswith("| `FLEETPILOT_")]
    assert pasted == printed
