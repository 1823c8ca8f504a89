"""`fleetpilot sim evaluate`: one JSON object with the documented keys, a readable table, a plot, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from sim.vast.scenario import Scenario
from sim.world.evaluate import Refusal, evaluate, limits_summary, limits_warning
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario

FLEETPILOT = Path(sys.executable).parent / "fleetpilot"
REQUIRED_KEYS = {
    "policy", "tasks_submitted", "tasks_completed", "cost_usd", "delay_cost_usd", "objective_usd", "wait_p50_min",
    "wait_p95_min", "wait_max_min", "machine_hours", "idle_machine_hours", "launches", "wasted_launches",
    "peak_instances", "sim_wall_s",
}  # fmt: skip


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    path.write_text("minute,arrivals\n" + "".join(f"{m},{12 if 30 <= m < 60 else 3}\n" for m in range(120)))
    return path


@pytest.mark.parametrize("policy", ["reactive", "target-tracking", "aws-predictive", "demand-based", "clairvoyant"])
def test_json_output_is_exactly_one_object_with_the_documented_keys(trace_file: Path, policy: str) -> None:
    result = CliRunner().invoke(app, ["sim", "evaluate", "--trace", str(trace_file), "--policy", policy, "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record.keys() >= REQUIRED_KEYS
    assert record["policy"] == policy
    assert record["tasks_submitted"] == 3 * 90 + 12 * 30
    assert record["objective_usd"] == pytest.approx(record["cost_usd"] + record["delay_cost_usd"], abs=1e-3)


def test_the_table_and_the_plot(trace_file: Path, tmp_path: Path) -> None:
    png = tmp_path / "run.png"
    result = CliRunner().invoke(
        app, ["sim", "evaluate", "--trace", str(trace_file), "--policy", "reactive", "--plot", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert "objective" in result.output and "wait p50 / p95 / max" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def fleetpilot(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it: its one-line errors and exit codes are its own."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FLEETPILOT_")}
    return subprocess.run([str(FLEETPILOT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_malformed_trace_is_a_clear_error_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("minute,arrivals\n0,4\n1,4\n2,four\n")
    result = fleetpilot("sim", "evaluate", "--trace", str(bad), "--policy", "reactive", "--json")
    assert result.returncode == 2
    assert "bad.csv:4:" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_an_unknown_policy_is_named(trace_file: Path) -> None:
    result = fleetpilot("sim", "evaluate", "--trace", str(trace_file), "--policy", "psychic")
    assert result.returncode == 2
    assert "psychic" in result.stderr and "clairvoyant-run" in result.stderr


def test_the_objective_can_be_configured(trace_file: Path) -> None:
    args = ["sim", "evaluate", "--trace", str(trace_file), "--policy", "reactive", "--json"]
    strict = json.loads(CliRunner().invoke(app, [*args, "--grace-min", "0", "--delay-usd-per-task-h", "5"]).stdout)
    assert (strict["grace_min"], strict["delay_usd_per_task_h"]) == (0, 5)


def test_the_clairvoyant_reports_the_bound_and_nothing_a_fractional_plan_would_invent(trace_file: Path) -> None:
    args = ["sim", "evaluate", "--trace", str(trace_file), "--policy", "clairvoyant"]
    record = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert record["kind"] == "lower_bound"
    for key in ("wait_p50_min", "wait_p95_min", "wait_max_min", "machine_hours", "launches", "peak_instances"):
        assert record[key] is None, key
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code == 0, shown.output
    words = " ".join(shown.output.split())  # the table wraps to the terminal's width
    assert "a lower bound, not a run" in words
    assert "wait p50" not in words and "clairvoyant-run" in words


def test_the_clairvoyant_run_is_a_real_run_at_or_above_the_bound(trace_file: Path) -> None:
    args = ["sim", "evaluate", "--trace", str(trace_file), "--json", "--policy"]
    bound = json.loads(CliRunner().invoke(app, [*args, "clairvoyant"]).stdout)
    run = CliRunner().invoke(app, [*args, "clairvoyant-run"])
    assert run.exit_code == 0, run.output
    record = json.loads(run.stdout)
    assert (record["policy"], record["kind"]) == ("clairvoyant-run", "clairvoyant_run")
    assert record["wait_p95_min"] is not None and record["launches"] is not None
    assert record["objective_usd"] >= bound["objective_usd"] - 1e-6


@pytest.fixture
def small_market(tmp_path: Path) -> Path:
    """Three RTX 4090s: 360 tasks/h at most."""
    path = tmp_path / "small.json"
    market = [{"gpu_model": "RTX 4090", "count": 3, "price_usd_per_h": {"min": 0.5, "max": 0.5}}]
    path.write_text(Scenario.quiet(market=market).model_dump_json())
    return path


def test_evaluate_warns_when_the_market_cannot_supply_the_peak(trace_file: Path, small_market: Path) -> None:
    # the trace's busiest hour brings 3 x 30 + 12 x 30 = 450 tasks, over the three machines' 360 tasks/h
    args = ["sim", "evaluate", "--trace", str(trace_file), "--policy", "reactive", "--scenario", str(small_market)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["market"]["supplies_peak"] is False
    assert record["market"]["capacity_tasks_per_h"] == 360
    assert record["warnings"] and "cannot supply this trace's peak" in record["warnings"][0]
    assert "warning: the market cannot supply" in result.stderr
    shown = CliRunner().invoke(app, args)
    assert " ".join(shown.output.split()).startswith("WARNING: the market cannot supply")


def test_no_market_warning_when_the_market_suffices(trace_file: Path) -> None:
    result = CliRunner().invoke(app, ["sim", "evaluate", "--trace", str(trace_file), "--policy", "reactive", "--json"])
    record = json.loads(result.stdout)
    assert record["market"]["supplies_peak"] is True
    assert record["warnings"] == [] and result.stderr == ""


def _guardrail_limit(limits: list[dict[str, object]]) -> dict[str, Any]:
    """The entry of the guardrail rule that refused the most (whichever binds first: instances or budget)."""
    guardrails = [entry for entry in limits if entry["limit"] not in ("market", "world_max_instances")]
    assert guardrails, limits
    return guardrails[0]


def test_refused_launches_are_summed_per_limit_with_when() -> None:
    refusals = [
        Refusal(3600 * 2.5, "market", 3),
        Refusal(3600 * 4.25, "market", 2),
        Refusal(3600 * 4.5, "max_launches_per_h", 1),
    ]
    summary = limits_summary(refusals)
    assert summary == [
        {"limit": "market", "refused": 5, "first_h": 2.5, "last_h": 4.25, "hours_with_refusals": 2},
        {"limit": "max_launches_per_h", "refused": 1, "first_h": 4.5, "last_h": 4.5, "hours_with_refusals": 1},
    ]
    warning = limits_warning(summary)
    assert "5 by the market had no free offer" in warning and "1 by guardrail max_launches_per_h" in warning
    assert limits_warning([]) == ""


def test_the_report_says_which_guardrail_refused_launches_and_when() -> None:
    # five times the 30-machine market for four hours: the policy asks for more than its guardrails allow
    surge = Trace.of([20] * 60 + [100] * 240 + [20] * 120, "surge")
    evaluation = evaluate(surge, "predictive", quiet_scenario(), 0)
    guardrail = _guardrail_limit(evaluation.extra["limits"])
    assert guardrail["refused"] > 0
    # from the surge (hour 1) to the end of the queue it left (the trace ends at hour 7, the queue later)
    assert 1.0 <= guardrail["first_h"] <= guardrail["last_h"] <= 12.0
    assert any(f"guardrail {guardrail['limit']} (from hour" in w for w in evaluation.warnings)
    assert "cannot supply this trace's peak" in evaluation.warnings[0]


def test_baselines_meet_the_same_guardrails_and_their_refusals_are_reported() -> None:
    # 1000 tasks queued at once: the demand-based scaler asks for ~125 machines in one launch (two commands, as a
    # command carries at most 100), beyond the guardrails' instance cap at the 30-machine market
    queued = Trace.of([1000 if m == 30 else 2 for m in range(240)], "queued")
    evaluation = evaluate(queued, "demand-based", quiet_scenario(), 0)
    guardrail = _guardrail_limit(evaluation.extra["limits"])
    assert guardrail["refused"] > 0
    assert guardrail["first_h"] == pytest.approx(31 / 60, abs=0.02)
    assert evaluation.peak_instances is not None and evaluation.peak_instances <= 30
    assert any(f"guardrail {guardrail['limit']} (from hour" in w for w in evaluation.warnings)
