"""Serving benchmark arithmetic on plain values: the seeded workload, summaries, comparisons, verdicts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.bench.serving_stats import (
    LevelSummary,
    RequestTiming,
    ServingRun,
    ServingWorkload,
    compare_runs,
    counted_output_tokens,
    judge_serving,
    output_shortfall,
    plan_requests,
    serving_result,
    summarize_level,
    without_credentials,
)

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def streamed(start_s: float, ttft_s: float, gap_s: float, tokens: int) -> RequestTiming:
    chunks = tuple(start_s + ttft_s + i * gap_s for i in range(tokens))
    return RequestTiming(start_s, chunks[-1] + 0.001, chunks[0], chunks, tokens)


def level(concurrency: int, tokens_per_s: float, ttft_s: float = 0.1, failed: int = 0, ok: int = 4) -> LevelSummary:
    return LevelSummary(
        concurrency=concurrency,
        requests=ok + failed,
        requests_ok=ok,
        requests_failed=failed,
        duration_s=10.0,
        output_tokens=int(tokens_per_s * 10),
        output_tokens_per_s=tokens_per_s,
        requests_per_s=ok / 10,
        ttft_p50_s=ttft_s,
        ttft_p99_s=ttft_s * 2,
        itl_p50_s=0.02,
        itl_p99_s=0.03,
        tpot_p50_s=0.02,
        latency_p50_s=1.0,
        error_samples=["HTTP 503: overloaded"] if failed else [],
    )


def run_of(*levels: LevelSummary, url: str = "http://gpu-1:8000") -> ServingRun:
    return ServingRun(url=url, model="m", workload=ServingWorkload(), started_at=NOW, levels=list(levels))


def test_the_workload_is_the_same_for_the_same_seed_and_level() -> None:
    workload = ServingWorkload(prompt_tokens=100, output_tokens=50, length_spread=0.2, min_requests=10)
    first, again = plan_requests(workload, 8), plan_requests(workload, 8)
    assert first == again
    assert len(first) == 32  # 4 waves of 8
    assert all(80 <= request.prompt_tokens <= 120 and 40 <= request.output_tokens <= 60 for request in first)
    assert all(len(request.prompt.split()) == request.prompt_tokens for request in first)
    assert plan_requests(workload.model_copy(update={"seed": 1}), 8) != first
    assert len(plan_requests(workload, 1)) == 10  # at least min_requests


def test_a_level_summary_has_throughput_and_latency_percentiles() -> None:
    timings = [streamed(0.0, 0.1, 0.02, 11), streamed(0.0, 0.3, 0.02, 11)]
    timings.append(RequestTiming(0.0, 0.5, error="HTTP 503: overloaded"))
    summary = summarize_level(2, timings, duration_s=2.0)
    assert summary.requests == 3 and summary.requests_ok == 2 and summary.requests_failed == 1
    assert summary.output_tokens == 22 and summary.output_tokens_per_s == pytest.approx(11.0)
    assert summary.requests_per_s == pytest.approx(1.0)
    assert summary.ttft_p50_s == pytest.approx(0.2)
    assert summary.ttft_p99_s == pytest.approx(0.298)
    assert summary.itl_p50_s == pytest.approx(0.02) and summary.tpot_p50_s == pytest.approx(0.02)
    assert summary.error_samples == ["HTTP 503: overloaded"]


def test_several_tokens_per_chunk_show_in_tpot_not_in_itl() -> None:
    # A speculative decoder: 2 tokens every 40 ms, i.e. 20 ms per token.
    chunks = tuple(0.1 + i * 0.04 for i in range(5))
    timing = RequestTiming(0.0, 0.3, chunks[0], chunks, output_tokens=10)
    summary = summarize_level(1, [timing], duration_s=0.3)
    assert summary.itl_p50_s == pytest.approx(0.04)
    assert summary.tpot_p50_s == pytest.approx(0.16 / 9)


def test_comparing_two_runs_gives_ratios_per_shared_level() -> None:
    speculative = run_of(level(1, 180.0, ttft_s=0.12), level(8, 900.0))
    baseline = run_of(level(1, 100.0, ttft_s=0.1), level(32, 2000.0))
    comparison = compare_runs(speculative, baseline)
    assert [compared.concurrency for compared in comparison.levels] == [1]
    ratios = comparison.levels[0].ratios
    assert ratios["output_tokens_per_s"] == pytest.approx(1.8)
    assert ratios["ttft_p50_s"] == pytest.approx(1.2)
    assert comparison.baseline_url == baseline.url


def test_verdicts_follow_failed_requests() -> None:
    assert judge_serving(run_of(level(1, 100.0), level(8, 700.0)))[0] == "pass"
    assert judge_serving(run_of(level(1, 100.0), level(8, 700.0, failed=1)))[0] == "degraded"
    verdict, why = judge_serving(run_of(level(1, 100.0), level(8, 0.0, failed=4, ok=0)))
    assert verdict == "fail" and "c=8 (4/4)" in why and "HTTP 503" in why


def test_credentials_in_a_url_never_reach_the_result() -> None:
    assert without_credentials("http://user:s3cret@gpu-1:8000/v1") == "http://gpu-1:8000/v1"
    run = run_of(level(1, 100.0), url="http://user:s3cret@gpu-1:8000")
    run = run.model_copy(update={"comparison": compare_runs(run, run_of(level(1, 50.0)))})
    result = serving_result(run, occurred_at=NOW, source="bench", instance_id=12)
    assert "s3cret" not in result.model_dump_json()
    assert result.kind == "serving" and result.device == "http" and result.instance_id == 12
    assert result.metrics["c1_output_tokens_per_s"] == 100.0
    assert result.ratios_to_reference["c1_output_tokens_per_s"] == pytest.approx(2.0)


def test_a_run_file_round_trips() -> None:
    run = run_of(level(1, 100.0))
    assert ServingRun.model_validate_json(run.model_dump_json(by_alias=True)) == run
    assert '"schema":"fleetpilot.serving_bench/1"' in run.model_dump_json(by_alias=True)


@pytest.mark.parametrize(
    ("claimed", "chunks", "text_bytes", "credited"),
    [
        (256, 256, 1024, 256),  # an honest server: its count
        (1_000_000, 1, 1, 1),  # a claim beyond the text that arrived
        (10**400, 300, 2000, 256),  # a claim beyond what was asked for
        (256, 128, 900, 256),  # two tokens a chunk (speculative decoding): all credited
        (None, 200, 800, 200),  # no usage chunk: one token a chunk
    ],
)
def test_a_request_is_credited_the_tokens_its_claim_text_and_request_allow(
    claimed: int | None, chunks: int, text_bytes: int, credited: int
) -> None:
    assert counted_output_tokens(claimed, chunks, text_bytes, max_tokens=256) == credited


def test_with_ignore_eos_far_fewer_tokens_than_asked_is_an_error() -> None:
    assert output_shortfall(255, 256, ignore_eos=True) is None
    assert output_shortfall(12, 256, ignore_eos=False) is None  # without it, stopping at the end is allowed
    assert output_shortfall(12, 256, ignore_eos=True) == (
        "12 of the 256 output tokens asked for with ignore_eos: the server stops early or ignores ignore_eos"
        " (sweep without it: --no-ignore-eos)"
    )


def test_error_samples_are_escaped_where_they_are_recorded() -> None:
    failed = RequestTiming(0.0, 1.0, error="HTTP 500: boom\x1b]0;title\x07\nverdict: pass")
    assert summarize_level(1, [failed], 1.0).error_samples == ["HTTP 500: boom\\x1b]0;title\\x07\\nverdict: pass"]
