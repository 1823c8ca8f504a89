"""`fleetpilot bench gpu` and `fleetpilot bench serving` as an operator runs them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import nats
import pytest
from typer.testing import CliRunner

from services.cli.main import app
from shared.contract import BenchResult
from shared.settings import Settings
from shared.streams import BENCH
from sim.infra import NatsServer
from sim.openai.process import OpenAIStandIn
from sim.openai.server import StandInConfig

runner = CliRunner()


def test_bench_gpu_json_prints_a_cpu_result_with_its_verdict() -> None:
    outcome = runner.invoke(app, ["bench", "gpu", "--json", "--min-time-s", "0.02"])
    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.stdout)
    result = BenchResult.model_validate(document["result"])
    assert result.device == "cpu" and result.verdict == "pass" and result.kind == "gpu"
    assert document["report"]["schema"] == "fleetpilot.gpu_suite/1"
    assert document["reference"] is None  # a CPU has no GPU reference; the explanation says so
    assert "correctness only" in result.explanation


def test_bench_gpu_publishes_its_result_when_asked(nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETPILOT_NATS_URL", nats_server.url)
    monkeypatch.setenv("FLEETPILOT_SUBJECT_PREFIX", "fpcli")
    # like a service it only binds: without the admin step's streams it says what to run, and publishes nothing
    missing = runner.invoke(app, ["bench", "gpu", "--json", "--min-time-s", "0.02", "--publish"])
    assert missing.exit_code == 2
    assert "error: --publish: JetStream stream" in missing.stderr and "fleetpilot streams ensure" in missing.stderr
    assert runner.invoke(app, ["streams", "ensure"]).exit_code == 0  # the admin step
    outcome = runner.invoke(app, ["bench", "gpu", "--json", "--min-time-s", "0.02", "--publish"])
    assert outcome.exit_code == 0, outcome.output
    printed = BenchResult.model_validate(json.loads(outcome.stdout)["result"])

    async def stored() -> BenchResult:
        client = await nats.connect(nats_server.url)
        try:
            subjects = Settings(subject_prefix="fpcli").subjects
            message = await client.jetstream().get_last_msg(BENCH.name(subjects), subjects.bench_result)
            return BenchResult.model_validate_json(message.data or b"")
        finally:
            await client.close()

    assert asyncio.run(stored()) == printed


def test_bench_serving_writes_a_run_and_compares_with_a_baseline(
    standin: Callable[[StandInConfig], OpenAIStandIn], tmp_path: Path
) -> None:
    common = ["--levels", "1,2", "--requests-per-level", "2", "--prompt-tokens", "8", "--output-tokens", "6", "--json"]
    baseline_server = standin(StandInConfig(tokens_per_s=100.0, ttft_s=0.02))
    faster_server = standin(StandInConfig(tokens_per_s=300.0, ttft_s=0.02, tokens_per_chunk=3))
    baseline_file = tmp_path / "baseline.json"

    first = runner.invoke(app, ["bench", "serving", "--url", baseline_server.url, "--out", str(baseline_file), *common])
    assert first.exit_code == 0, first.output
    assert json.loads(baseline_file.read_text())["schema"] == "fleetpilot.serving_bench/1"

    compared = ["--baseline", str(baseline_file), "--out", str(tmp_path / "faster.json")]
    second = runner.invoke(app, ["bench", "serving", "--url", faster_server.url, *compared, *common])
    assert second.exit_code == 0, second.output
    document = json.loads(second.stdout)
    comparison = document["run"]["comparison"]
    assert [level["concurrency"] for level in comparison["levels"]] == [1, 2]
    assert all(level["ratios"]["output_tokens_per_s"] > 1.0 for level in comparison["levels"])
    result = BenchResult.model_validate(document["result"])
    assert result.kind == "serving" and result.verdict == "pass"
    assert result.ratios_to_reference["c2_output_tokens_per_s"] > 1.0
    assert document["file"] == str(tmp_path / "faster.json")


def test_bench_serving_refuses_bad_levels_naming_them() -> None:
    outcome = runner.invoke(app, ["bench", "serving", "--url", "http://127.0.0.1:9", "--levels", "1,x"])
    assert outcome.exit_code == 2
    assert "1,x" in outcome.output


def test_bench_onstart_prints_the_line_for_vast_without_any_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETPILOT_BENCH_REPORT_TOKEN", "t0ken")
    printed = runner.invoke(app, ["bench", "onstart", "--bench-url", "https://bench.example/"])
    assert printed.exit_code == 0, printed.output
    line = printed.stdout.strip()
    assert "https://bench.example/bench/suite.py" in line and "--report-url https://bench.example/bench/report" in line
    assert "--device cuda" in line and line.endswith("&")  # in the background: the image's own start goes on
    # the same line goes to every machine: each one's token comes in its own environment, never in here
    assert "t0ken" not in line and "FLEETPILOT_BENCH_TOKEN" not in line
