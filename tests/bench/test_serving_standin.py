"""The serving benchmark against the stand-in over real HTTP streaming: it measures what the stand-in was set to.

The measurement is the feature under test, so measured rates are compared with configured ones; the
tolerances allow for a loaded 2-core machine (being late only lowers throughput, never raises it, so the
upper bounds are tight and the lower ones loose).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from services.bench.serving import run_sweep
from services.bench.serving_stats import ServingWorkload, judge_serving
from sim.openai.process import OpenAIStandIn
from sim.openai.server import StandInConfig

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
TOKENS_PER_S = 50.0
TTFT_S = 0.15
OUTPUT_TOKENS = 12

StartStandIn = Callable[[StandInConfig], OpenAIStandIn]


def fixed_workload(levels: tuple[int, ...], **changes: object) -> ServingWorkload:
    fields: dict[str, object] = {
        "levels": levels,
        "waves": 1,
        "min_requests": 4,
        "prompt_tokens": 16,
        "output_tokens": OUTPUT_TOKENS,
        "length_spread": 0.0,
    }
    fields.update(changes)
    return ServingWorkload.model_validate(fields)


def request_s(tokens_per_s: float, tokens_per_chunk: int = 1) -> float:
    """One request's configured duration: TTFT, then the remaining chunks at the stream's pace."""
    chunks = -(-OUTPUT_TOKENS // tokens_per_chunk)
    return TTFT_S + (chunks - 1) * tokens_per_chunk / tokens_per_s


def assert_near(measured: float | None, configured: float, low: float, high: float) -> None:
    assert measured is not None
    assert configured * low <= measured <= configured * high, f"measured {measured:.4f}, configured {configured:.4f}"


async def test_measured_throughput_and_latencies_match_the_configured_rates(standin: StartStandIn) -> None:
    server = standin(StandInConfig(tokens_per_s=TOKENS_PER_S, ttft_s=TTFT_S))
    run = await run_sweep(server.url, fixed_workload((1, 4, 16)), started_at=NOW)

    assert run.model == "standin-model" and [level.concurrency for level in run.levels] == [1, 4, 16]
    for level in run.levels:
        assert level.requests_failed == 0
        assert level.output_tokens == level.requests * OUTPUT_TOKENS
        assert_near(level.output_tokens_per_s, level.concurrency * OUTPUT_TOKENS / request_s(TOKENS_PER_S), 0.6, 1.1)
        assert_near(level.ttft_p50_s, TTFT_S, 0.95, 2.0)
        assert_near(level.itl_p50_s, 1 / TOKENS_PER_S, 0.7, 1.5)
        assert_near(level.tpot_p50_s, 1 / TOKENS_PER_S, 0.7, 1.5)
    assert server.stats()["max_in_flight"] == 16  # the top level really had 16 streams open
    assert judge_serving(run)[0] == "pass"


async def test_a_batch_cap_on_the_server_shows_as_capped_throughput_and_queueing(standin: StartStandIn) -> None:
    server = standin(StandInConfig(tokens_per_s=TOKENS_PER_S, ttft_s=TTFT_S, max_batch=4))
    run = await run_sweep(server.url, fixed_workload((16,)), started_at=NOW)

    level = run.levels[0]
    assert level.requests == 16 and level.requests_failed == 0
    # Four streams decode at a time: throughput of 4, and the last wave waits three requests for its first token.
    assert_near(level.output_tokens_per_s, 4 * OUTPUT_TOKENS / request_s(TOKENS_PER_S), 0.6, 1.1)
    assert_near(level.ttft_p99_s, 3 * request_s(TOKENS_PER_S) + TTFT_S, 0.9, 1.5)
    stats = server.stats()
    assert stats["max_decoding"] == 4 and stats["max_in_flight"] == 16


async def test_speculative_decoding_against_a_baseline_as_ratios_per_level(standin: StartStandIn) -> None:
    """Wall-clock ratios: a machine busy with other work can starve one of the two sweeps and skew a ratio, so a
    comparison outside the bands is measured again (three tries); a broken comparison misses every time."""
    baseline_server = standin(StandInConfig(tokens_per_s=TOKENS_PER_S, ttft_s=TTFT_S))
    speculative_server = standin(StandInConfig(tokens_per_s=2 * TOKENS_PER_S, ttft_s=TTFT_S, tokens_per_chunk=2))
    workload = fixed_workload((1, 4))
    expected_speedup = request_s(TOKENS_PER_S) / request_s(2 * TOKENS_PER_S, tokens_per_chunk=2)
    for attempt in range(3):
        baseline = await run_sweep(baseline_server.url, workload, started_at=NOW)
        speculative = await run_sweep(speculative_server.url, workload, started_at=NOW, baseline=baseline)
        assert speculative.comparison is not None
        assert [level.concurrency for level in speculative.comparison.levels] == [1, 4]
        try:
            for compared in speculative.comparison.levels:
                assert_near(compared.ratios["output_tokens_per_s"], expected_speedup, 0.75, 1.3)
                # Chunks come as often as before but carry two tokens: ITL per chunk unchanged, time per token
                # halved.
                assert_near(compared.ratios["itl_p50_s"], 1.0, 0.65, 1.5)
                assert_near(compared.ratios["tpot_p50_s"], 0.5, 0.65, 1.5)
            return
        except AssertionError:
            if attempt == 2:
                raise


async def test_requests_that_time_out_fail_the_run(standin: StartStandIn) -> None:
    server = standin(StandInConfig(tokens_per_s=TOKENS_PER_S, ttft_s=TTFT_S))
    workload = fixed_workload((2,), request_timeout_s=0.05, warmup_requests=0, model="standin-model")
    run = await run_sweep(server.url, workload, started_at=NOW)

    level = run.levels[0]
    assert level.requests_ok == 0 and level.requests_failed == 4
    assert any("Timeout" in sample for sample in level.error_samples)
    verdict, why = judge_serving(run)
    assert verdict == "fail" and "c=2 (4/4)" in why


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_both_openai_endpoints_are_measured(standin: StartStandIn, api: str) -> None:
    server = standin(StandInConfig(tokens_per_s=200.0, ttft_s=0.02))
    workload = fixed_workload((2,), api=api, output_tokens=5, min_requests=2, warmup_requests=0)
    run = await run_sweep(server.url + "/v1", workload, started_at=NOW)
    assert run.levels[0].requests_ok == 2 and run.levels[0].output_tokens == 10
