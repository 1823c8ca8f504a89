"""An ordinary mistake gets one line naming the variable or option and what it expects, exit code 2, and no
traceback: the real `fleetpilot` console script, run as a user runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared.processes import free_port
from tests.cli.conftest import RunCli


def assert_one_clear_line(done: subprocess.CompletedProcess[str], *names: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["ask", "why?", "--timeout", "5"],
        ["publish", "queue", "default=3"],
        ["publish", "task", "submitted", "task-1"],
        ["audit", "tail"],
        ["dlq", "list"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_nats_down_is_one_line_with_the_url_and_no_credentials(run_cli: RunCli, command: list[str]) -> None:
    url = f"nats://fleet-user:s3cret-password@127.0.0.1:{free_port()}"  # nothing listens there
    line = assert_one_clear_line(run_cli(*command, FLEETPILOT_NATS_URL=url), "FLEETPILOT_NATS_URL")
    assert f"nats://127.0.0.1:{url.rsplit(':', 1)[1]}" in line and "s3cret" not in line


def test_a_non_numeric_budget_names_the_environment_variable(run_cli: RunCli) -> None:
    line = assert_one_clear_line(run_cli("status", FLEETPILOT_BUDGET_USD_PER_H="twenty"), "FLEETPILOT_BUDGET_USD_PER_H")
    assert "'twenty'" in line and "number" in line


def test_a_bad_service_setting_names_its_own_variable(run_cli: RunCli) -> None:
    done = run_cli("run", "decider", FLEETPILOT_DECIDER_P1_QUIET_S="-5", FLEETPILOT_NATS_URL="nats://127.0.0.1:1")
    assert_one_clear_line(done, "FLEETPILOT_DECIDER_P1_QUIET_S", "greater than 0")


def test_an_unknown_decider_mode_says_what_is_expected(run_cli: RunCli) -> None:
    assert_one_clear_line(
        run_cli("config", "--check", FLEETPILOT_DECIDER_MODE="yolo"), "FLEETPILOT_DECIDER_MODE", "shadow"
    )


def test_an_unknown_log_level_names_the_option_and_the_choices(run_cli: RunCli) -> None:
    assert_one_clear_line(run_cli("run", "fleet", "--log-level", "loud"), "--log-level", "'loud'", "debug")


def test_an_unwritable_out_path_is_refused_before_any_work(run_cli: RunCli, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "asyncapi.json"
    assert_one_clear_line(run_cli("asyncapi", "--out", str(missing)), "--out", "does not exist")
    done = run_cli("sim", "evaluate", "--trace", "x.csv", "--policy", "reactive", "--plot", str(tmp_path))
    assert_one_clear_line(done, "--plot", "is a directory")


def test_a_bad_scenario_file_is_one_line_naming_the_field(run_cli: RunCli, tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("seed: not-a-number\n")
    line = assert_one_clear_line(
        run_cli("sim", "vast", "--scenario", str(scenario), FLEETPILOT_VAST_API_KEY="k"), "--scenario", "seed"
    )
    assert "'not-a-number'" in line
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1,\n")
    assert_one_clear_line(run_cli("sim", "vast", "--scenario", str(broken), FLEETPILOT_VAST_API_KEY="k"), "--scenario")
    assert_one_clear_line(
        run_cli("sim", "evaluate", "--trace", "t.csv", "--policy", "reactive", "--scenario", str(scenario)),
        "--scenario",
        "seed",
    )


def test_a_bad_demo_trace_is_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("minute,arrivals\n0,lots\n")
    assert_one_clear_line(run_cli("demo", "--fast", "--trace", str(trace)), "--trace", "trace.csv")


def test_publish_queue_help_shows_the_format(run_cli: RunCli) -> None:
    done = run_cli("publish", "queue", "--help")
    assert done.returncode == 0, done.stderr
    assert "TYPE=PENDING/RUNNING" in done.stdout and "Traceback" not in done.stderr


def test_the_version_is_the_installed_one(run_cli: RunCli) -> None:
    from importlib.metadata import version

    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"fleetpilot {version('fleetpilot')}"


def test_a_trace_saved_with_a_utf8_bom_is_read(tmp_path: Path) -> None:
    from sim.world.trace import load_trace

    trace = tmp_path / "excel.csv"
    trace.write_bytes(b"\xef\xbb\xbfminute,arrivals\r\n0,3\r\n1,4\r\n")
    assert load_trace(trace).arrivals_per_min == (3, 4)
