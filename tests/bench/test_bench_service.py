"""The bench service on real NATS, Redis and HTTP: requests in, suite reports over HTTP, verdicts on the bus."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from redis.asyncio import Redis

from services.bench.app import build
from services.bench.collect import result_event_id
from services.bench.intake import intake_app
from services.bench.metrics import BenchMetrics
from services.bench.onstart import onstart_command
from services.bench.rate_limit import PerKeyRateLimit
from services.bench.store import BenchStore
from shared.clock import RealClock, SimulatedClock
from shared.contract import BenchRequest, BenchResult, DeadLetter
from shared.processes import free_port
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import BENCH
from sim.openai.process import OpenAIStandIn
from sim.openai.server import StandInConfig
from tests.bench.service_helpers import (
    NOW,
    bench_settings,
    collect,
    gpu_request,
    instance_env,
    label_for,
    over_http,
    post_report,
    request_bench,
    suite_report,
    token_for,
)
from tests.helpers import eventually


@pytest.mark.parametrize(
    ("share", "errors", "verdict"),
    [
        (0.5, None, "degraded"),
        (1.0, ["memory_copy: RuntimeError: CUDA error: uncorrectable ECC error encountered"], "fail"),
        (1.0, None, "pass"),
    ],
)
async def test_a_reported_machine_gets_its_verdict_on_the_bus(
    settings: Settings, nc: NatsClient, js: JetStreamContext, share: float, errors: list[str] | None, verdict: str
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    async with over_http(app) as base_url:
        request = gpu_request(101)
        await request_bench(js, settings, request)
        response = await post_report(base_url, suite_report(101, share, errors))
        assert response.status_code == 202
        await eventually(lambda: len(results) == 1)

    result = results[0]
    assert result.verdict == verdict and result.instance_id == 101 and result.gpu_model == "H100 SXM"
    assert result.event_id == result_event_id(request.event_id)
    assert result.device == "cuda" and result.kind == "gpu"
    if verdict == "degraded":
        assert result.ratios_to_reference["matmul_bf16_tflops"] == pytest.approx(0.5)
    if verdict == "fail":
        assert result.error is not None and "ECC" in result.error


async def test_the_onstart_line_fetches_the_suite_runs_it_and_reports_before_the_request(
    settings: Settings, nc: NatsClient, js: JetStreamContext, redis_server: Any, tmp_path: Path
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    ctx = ServiceContext("bench", settings, RealClock())
    app = build(ctx, bench_settings(cpu_reports="correctness_only"))
    redis = Redis.from_url(settings.redis_url)
    store = BenchStore(redis, settings.subjects.prefix, 600)
    async with over_http(app) as base_url:
        # What vast runs at container start; "cpu" because this machine has no GPU (the real line says cuda).
        line = onstart_command(base_url, device="cpu", suite_dir=str(tmp_path))
        environment = {
            **os.environ,
            **instance_env(202),  # what the provisioner created the instance with
            "CONTAINER_ID": "202",
            "OPENBLAS_NUM_THREADS": "1",  # two BLAS threads fighting the test for two cores crawl
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        shell = await asyncio.create_subprocess_exec("bash", "-c", line, env=environment)
        assert await asyncio.wait_for(shell.wait(), timeout=30) == 0  # returns at once: the suite runs on behind
        await eventually(lambda: store.report(label_for(202)), timeout_s=30)
        assert results == []  # nobody asked yet: the report waits

        request = gpu_request(202)
        await request_bench(js, settings, request)
        await eventually(lambda: len(results) == 1)
    await redis.aclose()

    result = results[0]
    assert result.instance_id == 202 and result.device == "cpu" and result.verdict == "pass"
    assert result.metrics["matmul_bf16_tflops"] > 0
    assert (tmp_path / "fleetpilot_gpu_suite.py").read_text().startswith('"""The GPU benchmark suite')


async def test_bad_reports_are_refused_with_the_reason(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    ctx = ServiceContext("bench", settings, RealClock())
    app = build(ctx, bench_settings())
    async with over_http(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        good = {"authorization": f"Bearer {token_for(1)}"}
        wrong_token = await client.post("/bench/report", json=suite_report(1, 1.0), headers={"authorization": "x"})
        assert wrong_token.status_code == 401

        malformed = {**suite_report(1, 1.0), "device": "tpu"}
        invalid = await client.post("/bench/report", json=malformed, headers=good)
        assert invalid.status_code == 422 and "device" in invalid.text and "tpu" in invalid.text

        anonymous = await client.post("/bench/report", json={**suite_report(1, 1.0), "instance_id": None}, headers=good)
        assert anonymous.status_code == 422 and "instance_id" in anonymous.text

        negative = {**suite_report(1, 1.0), "metrics": {"matmul_bf16_tflops": -1.0}}
        assert (await client.post("/bench/report", json=negative, headers=good)).status_code == 422

        # an endless run was stored as null and then failed every read of the report, the sweep's with it
        endless = json.dumps({**suite_report(1, 1.0), "duration_s": float("inf")}, default=str)  # `Infinity`
        refused = await client.post(
            "/bench/report", content=endless, headers={**good, "content-type": "application/json"}
        )
        assert refused.status_code == 422 and "duration_s" in refused.text
        # a moment past the last UTC datetime: refused as invalid, not a server error
        beyond = {**suite_report(1, 1.0), "started_at": "9999-12-31T23:59:59-23:59"}
        refused = await client.post("/bench/report", json=beyond, headers=good)
        assert refused.status_code == 422 and "started_at" in refused.text

    registry = ctx.metrics.registry
    assert registry.get_sample_value("fleetpilot_bench_reports_total", {"outcome": "unauthorized"}) == 1
    assert registry.get_sample_value("fleetpilot_bench_reports_total", {"outcome": "invalid"}) == 5


async def test_a_stored_report_that_no_longer_reads_is_no_report(settings: Settings, redis_server: Any) -> None:
    """A report stored by a looser version (an endless run kept as null) failed every read, the overdue sweep's
    with it: it reads as no report now, so the request ends `unknown` like any report that never came."""
    redis = Redis.from_url(settings.redis_url)
    store = BenchStore(redis, settings.subjects.prefix, 600)
    stored = {**suite_report(7, 1.0), "duration_s": None}
    await redis.set(f"{settings.subjects.prefix}:bench:report:instance-7", json.dumps(stored, default=str))
    assert await store.report("instance-7") is None
    assert await store.report("instance-8") is None
    await redis.aclose()


async def test_without_a_configured_token_every_report_is_refused() -> None:
    from prometheus_client import CollectorRegistry

    async def never(instance_id: int, report: Any) -> bool:
        raise AssertionError("no report may get through")

    intake = intake_app(never, None, BenchMetrics(CollectorRegistry()), 1024, PerKeyRateLimit(1, 1.0), RealClock())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=intake), base_url="http://bench") as client:
        response = await client.post("/bench/report", json=suite_report(1, 1.0), headers={"authorization": "Bearer "})
        assert response.status_code == 503 and "FLEETPILOT_BENCH_REPORT_TOKEN" in response.text
        suite = await client.get("/bench/suite.py")
        assert suite.status_code == 200 and "def run_suite" in suite.text


async def test_a_missing_report_is_unknown_retried_and_counted_never_fail_and_a_late_report_is_judged(
    settings: Settings, nc: NatsClient, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    config = bench_settings(report_timeout_s=600.0, sweep_interval_s=30.0, report_retries=1)
    ctx = ServiceContext("bench", settings, sim_clock)
    app = build(ctx, config)
    redis = Redis.from_url(settings.redis_url)
    store = BenchStore(redis, settings.subjects.prefix, 600)
    request = gpu_request(303, occurred_at=sim_clock.now())
    try:
        async with over_http(app) as base_url:
            await request_bench(js, settings, request)
            await eventually(lambda: store.pending(303))
            await sim_clock.advance_and_settle(570.0, step_s=30.0)
            await asyncio.sleep(0.2)
            assert results == []  # not yet: the deadline is 600 s after the request

            async def advance_until(count: int) -> bool:
                await sim_clock.advance_and_settle(30.0)
                return len(results) >= count

            await eventually(lambda: advance_until(1), timeout_s=10, interval_s=0.1)
            pending = await store.pending(303)
            assert pending is not None and pending.missed_reports == 1  # still waited on
            # the report arrives after the first miss: judged, and published under the request's own event id
            response = await post_report(base_url, suite_report(303, 1.0))
            assert response.status_code == 202
            await eventually(lambda: len(results) == 2)
            missing = ctx.metrics.registry.get_sample_value("fleetpilot_bench_reports_missing_total")
    finally:
        await redis.aclose()

    unknown, judged = results
    assert unknown.verdict == "unknown" and unknown.instance_id == 303
    assert unknown.error is not None and "no suite report from instance 303" in unknown.error
    assert "waiting again" in unknown.explanation
    assert judged.verdict == "pass" and judged.event_id == result_event_id(request.event_id)
    assert missing == 1
    assert all(r.verdict != "fail" for r in results)


async def test_after_its_retries_a_missing_report_stops_being_waited_on(
    settings: Settings, nc: NatsClient, js: JetStreamContext, sim_clock: SimulatedClock
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, sim_clock), bench_settings(report_retries=1))
    redis = Redis.from_url(settings.redis_url)
    store = BenchStore(redis, settings.subjects.prefix, 600)
    await app.start()
    try:
        await request_bench(js, settings, gpu_request(304, occurred_at=sim_clock.now()))
        await eventually(lambda: store.pending(304))

        async def advance_until_two() -> bool:
            await sim_clock.advance_and_settle(60.0)
            return len(results) >= 2

        await eventually(advance_until_two, timeout_s=15, interval_s=0.1)
        await eventually(lambda: _no_pending(store, 304))
    finally:
        await app.stop()
        await redis.aclose()
    assert [r.verdict for r in results] == ["unknown", "unknown"]
    assert "no longer waiting" in results[1].explanation


async def _no_pending(store: BenchStore, instance_id: int) -> bool:
    return await store.pending(instance_id) is None


async def test_a_request_without_instance_runs_the_suite_here(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    ctx = ServiceContext("bench", settings, RealClock())
    app = build(ctx, bench_settings())
    await app.start()
    try:
        request = gpu_request(None)
        await request_bench(js, settings, request)
        await eventually(lambda: len(results) == 1, timeout_s=30)
        # The same request again (a redelivery JetStream did not de-duplicate) is not benchmarked twice.
        await js.publish(
            settings.subjects.bench_request, request.model_dump_json().encode(), stream=BENCH.name(settings.subjects)
        )
        duplicates = ctx.metrics.registry.get_sample_value
        await eventually(lambda: duplicates("fleetpilot_duplicate_events_total", {"service": "bench"}) == 1)
    finally:
        await app.stop()

    assert len(results) == 1
    assert results[0].device == "cpu" and results[0].verdict == "pass" and results[0].instance_id is None


async def test_a_serving_request_is_benchmarked_against_its_endpoint(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    with OpenAIStandIn(StandInConfig(tokens_per_s=200.0, ttft_s=0.02)) as endpoint:
        await app.start()
        try:
            reachable = BenchRequest(occurred_at=NOW, source="operator", kind="serving", url=endpoint.url)
            unreachable = BenchRequest(
                occurred_at=NOW, source="operator", kind="serving", url=f"http://127.0.0.1:{free_port()}"
            )
            await request_bench(js, settings, reachable)
            await request_bench(js, settings, unreachable)
            await eventually(lambda: len(results) == 2, timeout_s=30)
        finally:
            await app.stop()

    by_request = {result.event_id: result for result in results}
    served = by_request[result_event_id(reachable.event_id)]
    assert served.kind == "serving" and served.device == "http" and served.verdict == "pass"
    assert served.metrics["c2_output_tokens_per_s"] > 0 and served.metrics["c1_requests_failed"] == 0
    down = by_request[result_event_id(unreachable.event_id)]
    assert down.verdict == "fail" and down.error is not None and "ConnectError" in down.error


async def test_a_serving_request_without_url_is_dead_lettered_naming_the_field(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    letters = await collect(nc, settings.subjects.dead_letter("bench"), DeadLetter)
    results: list[BenchResult] = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    await app.start()
    try:
        await request_bench(js, settings, BenchRequest(occurred_at=NOW, source="operator", kind="serving"))
        await request_bench(js, settings, gpu_request(None))  # the service keeps working
        await eventually(lambda: len(letters) == 1 and len(results) == 1, timeout_s=30)
    finally:
        await app.stop()
    assert letters[0].reason == "invalid_message" and "url" in letters[0].error


def test_bench_will_not_start_without_the_report_token() -> None:
    """A real process through the entry point `fleetpilot run bench` calls: one line, exit code 2, no traceback."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPILOT_")}
    done = subprocess.run(
        [sys.executable, "-c", "from services.bench.app import create_app; create_app()"],
        env={**clean, "FLEETPILOT_NATS_URL": "nats://127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: FLEETPILOT_BENCH_REPORT_TOKEN is not set"), done.stderr
