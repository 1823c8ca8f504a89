"""`fleetpilot demo --fast` end to end: every service as a process, the summary checked, the metrics scraped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from services.cli.demo import REQUIRED_METRICS, check
from tests.deploy.metric_names import DASHBOARD_METRICS

SANE = {
    "tasks_submitted": 100,
    "tasks_completed": 100,
    "launches": 3,
    "peak_spend_usd_per_h": 1.5,
    "budget_usd_per_h": 10.0,
    "peak_instances": 3,
    "max_instances": 20,
    "dead_letters": 0,
    "decisions": {"acted": 3, "hold": 40},
    "metrics": {"demand": {"missing": []}},
    "crashed_processes": [],
}


def test_the_summary_check_passes_a_sane_run() -> None:
    assert check(SANE) == []


def test_the_summary_check_fails_each_kind_of_insane_run() -> None:
    broken = {
        "tasks_completed": 10,
        "launches": 0,
        "peak_spend_usd_per_h": 12.0,
        "peak_instances": 21,
        "dead_letters": 2,
        "decisions": {},
        "metrics": {"fleet": {"missing": ["fleetpilot_fleet_instances"]}},
        "crashed_processes": ["decider"],
    }
    for field, value in broken.items():
        problems = check({**SANE, field: value})
        assert len(problems) == 1, (field, problems)


def test_fast_demo_serves_the_work_within_budget_and_exports_every_metric(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    run = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "demo", "--fast", "--no-live", "--summary-json", str(summary_path)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert check(summary) == []
    assert summary["tasks_completed"] > 0
    # every service's /metrics was scraped while the stack ran, and has what the issue lists
    assert set(summary["metrics"]) == set(REQUIRED_METRICS)
    exported = {name for found in summary["metrics"].values() for name in found["exported"]}
    assert not [name for name in DASHBOARD_METRICS if name not in exported], "dashboards query unexported metrics"
