"""`fleetpilot agent eval` and `fleetpilot llm serve` as a user runs them: ordinary mistakes in one line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import RunCli, run_cli  # noqa: F401 (the fixture)


def test_an_unknown_scenario_is_one_line_naming_the_option(run_cli: RunCli) -> None:  # noqa: F811
    done = run_cli("agent", "eval", "--scenario", "no_such_thing")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--scenario: unknown scenario(s) no_such_thing" in done.stderr and len(done.stderr.splitlines()) == 1


def test_the_local_target_without_an_install_says_what_is_missing(run_cli: RunCli, tmp_path: Path) -> None:  # noqa: F811
    done = run_cli("agent", "eval", "--target", "local", "--dir", str(tmp_path / "none"))
    assert done.returncode == 2 and "--target local: not installed" in done.stderr and "Traceback" not in done.stderr


def test_an_eval_on_the_stand_in_writes_its_json(run_cli: RunCli, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "eval.json"
    done = run_cli("agent", "eval", "--scenario", "served_steady", "--scenario", "stuck_loading", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "decision agreement" in done.stdout
    summary = json.loads(out.read_text())["targets"]["standin"]["summary"]
    assert summary["runs"] == 2 and summary["agreement_pct"] == 100.0
