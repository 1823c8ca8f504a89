"""The demo's options reach the plan it runs; the first `make` says what it is doing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from services.cli.demo import with_options
from services.cli.errors import UserMistake
from sim.stack import StackPlan

REPO = Path(__file__).resolve().parents[2]


def test_trace_budget_and_speed_options_change_the_plan(tmp_path: Path) -> None:
    trace = tmp_path / "mine.csv"
    trace.write_text("minute,arrivals\n" + "".join(f"{minute},5\n" for minute in range(120)))
    plan = with_options(StackPlan.fast(), trace, 5.0, 1440.0)
    assert (plan.trace, plan.budget_usd_per_h, plan.speed) == (trace, 5.0, 1440.0)
    # the fast plan starts at 06:00, past this two-hour trace: it replays the trace from its start instead
    assert (plan.start_minute, plan.minutes) == (0, 120)
    assert with_options(StackPlan.fast(), None, None, None) == StackPlan.fast()


def test_an_empty_trace_is_refused_naming_the_option(tmp_path: Path) -> None:
    trace = tmp_path / "empty.csv"
    trace.write_text("minute,arrivals\n")
    with pytest.raises(UserMistake, match=r"^--trace .*empty\.csv"):
        with_options(StackPlan.full(), trace, None, None)


def test_the_first_make_says_what_it_installs() -> None:
    dry_run = subprocess.run(
        ["make", "-n", "-B", "setup", "VENV=/nonexistent/venv"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert dry_run.returncode == 0, dry_run.stderr
    assert "first run: creating /nonexistent/venv and installing FleetPilot" in dry_run.stdout
