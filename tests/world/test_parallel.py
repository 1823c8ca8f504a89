"""Evaluations run side by side give what a serial run gives, in the jobs' order; Ray only when chosen."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from benchmarks import policy as policy_benchmark
from sim.world.evaluate import evaluate
from sim.world.parallel import BackendUnavailable, run_all
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario, timing

RAY_INSTALLED = importlib.util.find_spec("ray") is not None


def _tiny_jobs() -> list[tuple[Any, ...]]:
    """Short traces under cheap policies, the longest first, so a pool finishes them out of order."""
    scenario = quiet_scenario()
    traces = [Trace.of([8] * 360, "six-hours"), Trace.of([2] * 60 + [12] * 60, "step"), Trace.of([3] * 30, "short")]
    return [(trace, policy, scenario, 0) for trace in traces for policy in ("reactive", "vast-serverless")]


def _figures(evaluations: list[Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.as_dict().items() if not timing(k)} for e in evaluations]


def test_a_process_pool_gives_what_a_serial_run_gives_in_the_jobs_order() -> None:
    jobs = _tiny_jobs()
    ended: list[int] = []
    serial = run_all(evaluate, jobs, workers=1)
    parallel = run_all(evaluate, jobs, workers=2, progress=lambda index, wall_s: ended.append(index))
    assert _figures(parallel) == _figures(serial)
    assert [(e.trace, e.policy) for e in parallel] == [(trace.name, policy) for trace, policy, *_ in jobs]
    assert sorted(ended) == list(range(len(jobs)))


def test_workers_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="workers=0"):
        run_all(evaluate, _tiny_jobs(), workers=0)


@pytest.mark.skipif(RAY_INSTALLED, reason="ray is installed here: the missing-ray message cannot be shown")
def test_ray_without_ray_installed_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BackendUnavailable, match="ray is not installed"):
        run_all(evaluate, _tiny_jobs(), backend="ray")
    status = policy_benchmark.main(["--backend", "ray", "--family", "diurnal", "--split", "train", "--days", "1"])
    assert status == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --backend ray: ray is not installed")


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if not timing(k)}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_the_family_benchmark_in_parallel_writes_what_a_serial_run_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the smallest real configuration: one family, two train seeds of a day, every policy and reference
    monkeypatch.chdir(tmp_path)  # the benchmark writes bench-results/ where it runs
    written = []
    for workers in (1, 2):
        console = Console(file=io.StringIO())
        assert policy_benchmark.families(["quiet-surges"], [100, 101], [], 1, console, workers=workers) == 0
        written.append(json.loads((tmp_path / "bench-results" / "policy.json").read_text()))
    serial, parallel = (_without_timings(result) for result in written)
    assert parallel == serial
    assert [t["trace"] for t in parallel["splits"]["train"]["traces"]["quiet-surges"]] == [
        "quiet-surges-100",
        "quiet-surges-101",
    ]
