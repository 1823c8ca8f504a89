"""The demo's rented machines run bench's real suite (CPU variant) and post what they measured."""

from __future__ import annotations

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from services.bench.app import build
from services.bench.gpu_suite import MATMUL_BF16, MEMORY_COPY
from shared.clock import RealClock
from shared.contract import BenchResult
from shared.service import ServiceContext
from shared.settings import Settings
from sim.jobs.suite import DemoMachineSuites, suite_url_for
from tests.bench.service_helpers import bench_settings, collect, gpu_request, instance_env, over_http, request_bench
from tests.helpers import eventually


async def run_suites(base_url: str, *instance_ids: int, token: str | None = None) -> DemoMachineSuites:
    """As many demo machines starting at once, each running the suite to the end with its created environment."""
    suites = DemoMachineSuites(f"{base_url}/bench/report", min_time_s=0.02)
    try:
        for instance_id in instance_ids:
            env = instance_env(instance_id)
            suites.start(instance_id, env if token is None else {**env, "FLEETPILOT_BENCH_TOKEN": token})
        await suites.wait()
    finally:
        await suites.aclose()
    return suites


def test_the_suite_is_fetched_beside_the_intake() -> None:
    assert suite_url_for("http://127.0.0.1:9/bench/report") == "http://127.0.0.1:9/bench/suite.py"


async def test_a_demo_machine_fetches_the_suite_runs_it_and_its_measurements_reach_a_verdict(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings(cpu_reports="correctness_only"))
    async with over_http(app) as base_url:
        suites = await run_suites(base_url, 4242, 4343)
        await request_bench(js, settings, gpu_request(4242))
        await eventually(lambda: len(results) == 1, timeout_s=20)
    assert suites.outcomes == {4242: 0, 4343: 0}
    [result] = results
    assert result.instance_id == 4242 and result.device == "cpu" and result.verdict == "pass"
    # measured on this CPU now: positive, finite, and not a GPU reference scaled (a CPU is far below any GPU's)
    assert result.metrics[MATMUL_BF16] > 0 and result.metrics[MEMORY_COPY] > 0
    assert result.metrics[MATMUL_BF16] < 50  # TFLOP/s: every reference in the table is above this


async def test_a_wrong_token_is_refused_and_no_verdict_is_made_up(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    async with over_http(app) as base_url:
        suites = await run_suites(base_url, 4444, token="not-the-token")
    assert suites.outcomes == {4444: 2}  # the suite says its report was refused
    assert results == []
