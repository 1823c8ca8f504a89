"""bench's wiring: bench requests in, suite reports over HTTP, verdicts out on `<prefix>.bench.result`.

kind="gpu" with an instance id waits for that instance's suite report (see collect.py); without one it runs
the suite here. kind="serving" sweeps the endpoint at `url`, telling JetStream it is still at work meanwhile.
"""

from __future__ import annotations

import asyncio
import time

import httpx
from faststream.asgi import AsgiFastStream
from faststream.nats import NatsMessage
from pydantic import AnyHttpUrl, BaseModel
from redis.asyncio import Redis

from services.bench import gpu_suite
from services.bench.collect import (
    missing_report_result,
    overdue,
    pending_from_request,
    result_event_id,
    waiting_again,
)
from services.bench.config import BenchSettings
from services.bench.intake import REPORT_PATH, SUITE_PATH, ReportOutcome, intake_app
from services.bench.metrics import BenchMetrics
from services.bench.rate_limit import PerKeyRateLimit
from services.bench.references import reference_for
from services.bench.report import SuiteReport
from services.bench.serving import run_sweep
from services.bench.serving_stats import serving_result, unreachable_result
from services.bench.store import BenchStore
from services.bench.verdict import gpu_result, judge_gpu, judge_rented
from shared.bus import durable_pull, publish_event
from shared.contract import BenchRequest, BenchResult
from shared.live_mode import exit_for_setting, is_live
from shared.service import ServiceContext, asgi_app, stop_tasks
from shared.settings import Settings
from shared.streams import ACK_WAIT_S, BENCH

SERVICE = "bench"

# A serving sweep outlasts JetStream's ack wait; the handler says "still working" well within it.
IN_PROGRESS_EVERY_S = ACK_WAIT_S / 3

# GPU requests are quick (store, maybe judge); a long serving sweep must not hold them up.
CONCURRENT_REQUESTS = 4


class ServingTarget(BaseModel):
    """A serving request's endpoint, validated so a bad one is refused naming the field and its value."""

    url: AnyHttpUrl


def local_suite_report(min_time_s: float | None) -> SuiteReport:
    """Run the suite on this machine (GPU if usable, else the CPU variant)."""
    backend, unusable = gpu_suite.select_backend("auto")
    if backend is None:
        raw = gpu_suite.unusable_report(unusable or "no backend", None)
    else:
        raw = gpu_suite.run_suite(backend, gpu_suite.SuiteSizes.for_device(backend.device, min_time_s))
    return SuiteReport.model_validate(raw)


def build(
    ctx: ServiceContext, bench_settings: BenchSettings | None = None, redis: Redis | None = None
) -> AsgiFastStream:
    config = bench_settings or BenchSettings()
    metrics = BenchMetrics(ctx.metrics.registry)
    redis_client = redis or Redis.from_url(ctx.settings.redis_url)
    store = BenchStore(redis_client, ctx.subjects.prefix, config.report_ttl_s)
    thresholds = config.thresholds()
    bench_stream = BENCH.name(ctx.subjects)

    async def publish(result: BenchResult) -> None:
        await publish_event(ctx.broker, ctx.subjects.bench_result, result, stream=bench_stream)
        metrics.results.labels(result.kind, result.verdict).inc()
        ctx.log.info("bench result for instance %s: %s", result.instance_id, result.explanation)

    async def complete_if_reported(instance_id: int) -> bool:
        """Publish the verdict when both the request and its label's report are in; either may come first."""
        pending = await store.pending(instance_id)
        if pending is None or pending.label is None:  # no label: no report can prove it is this instance's
            return False
        report = await store.report(pending.label)
        if report is None or not await store.claim(pending.request_event_id):
            return False
        judgement = judge_rented(
            report,
            instance_id=instance_id,
            listed_gpu_model=pending.listed_gpu_model,
            thresholds=thresholds,
            cpu_reports=config.cpu_reports,
        )
        result = gpu_result(
            report,
            judgement,
            occurred_at=ctx.clock.now(),
            source=SERVICE,
            instance_id=instance_id,
            event_id=result_event_id(pending.request_event_id),
        )
        await publish(result)
        await store.finish(pending.request_event_id, instance_id)
        return True

    async def on_report(label: str, report: SuiteReport) -> ReportOutcome:
        """Kept only when no other machine's request waits on the instance it names, and only once per label."""
        assert report.instance_id is not None  # the intake refuses reports without one
        named = await store.pending(report.instance_id)
        if named is not None and named.label is not None and named.label != label:
            return ReportOutcome.MISMATCH
        if not await store.put_report(label, report):
            return ReportOutcome.DUPLICATE
        judged = await complete_if_reported(report.instance_id)
        return ReportOutcome.JUDGED if judged else ReportOutcome.STORED

    async def run_local_gpu(request: BenchRequest) -> None:
        started_s = time.perf_counter()
        report = await asyncio.to_thread(local_suite_report, config.local_min_time_s)
        metrics.run_duration.labels("gpu").observe(time.perf_counter() - started_s)
        judgement = judge_gpu(report, reference_for(report.gpu_name), thresholds)
        await publish(
            gpu_result(
                report,
                judgement,
                occurred_at=ctx.clock.now(),
                source=SERVICE,
                event_id=result_event_id(request.event_id),
            )
        )

    async def keep_in_progress(message: NatsMessage) -> None:
        while True:
            await ctx.clock.sleep(IN_PROGRESS_EVERY_S)
            await message.in_progress()

    async def run_serving(request: BenchRequest, message: NatsMessage) -> None:
        target = ServingTarget.model_validate({"url": request.url})
        heartbeat = asyncio.create_task(keep_in_progress(message))
        started_s = time.perf_counter()
        event_id = result_event_id(request.event_id)
        try:
            run = await run_sweep(
                str(target.url),
                config.serving_workload(),
                started_at=ctx.clock.now(),
                api_key=config.serving_api_key.get_secret_value() if config.serving_api_key else None,
            )
        except (httpx.HTTPError, ValueError) as error:  # per-request failures are counted inside the levels
            await publish(
                unreachable_result(
                    str(target.url),
                    error,
                    occurred_at=ctx.clock.now(),
                    source=SERVICE,
                    instance_id=request.instance_id,
                    event_id=event_id,
                )
            )
            return
        finally:
            heartbeat.cancel()
        metrics.run_duration.labels("serving").observe(time.perf_counter() - started_s)
        await publish(
            serving_result(
                run, occurred_at=ctx.clock.now(), source=SERVICE, instance_id=request.instance_id, event_id=event_id
            )
        )

    @ctx.broker.subscriber(
        ctx.subjects.bench_request,
        **durable_pull(BENCH, ctx.settings, SERVICE),
        max_workers=CONCURRENT_REQUESTS,
    )
    async def on_bench_request(request: BenchRequest, message: NatsMessage) -> None:
        if await store.is_done(request.event_id):
            ctx.metrics.duplicates_ignored.labels(SERVICE).inc()
            return
        if request.kind == "serving":
            await run_serving(request, message)
        elif request.instance_id is None:
            await run_local_gpu(request)
        else:
            await store.add_pending(pending_from_request(request, config.report_timeout_s))
            await complete_if_reported(request.instance_id)
            return  # finished by complete_if_reported, or later by a report or the sweep
        await store.finish(request.event_id)

    async def report_overdue_requests() -> None:
        """Each request past its deadline without a report: `unknown`, counted, and (retries left) waited on again."""
        pending = await store.all_pending()
        metrics.pending_requests.set(len(pending))
        for bench in overdue(pending, ctx.clock.now()):
            if await complete_if_reported(bench.instance_id) or not await store.claim(bench.request_event_id):
                continue
            now = ctx.clock.now()
            waits_left = config.report_retries - bench.missed_reports
            metrics.reports_missing.inc()
            await publish(missing_report_result(bench, occurred_at=now, source=SERVICE, waits_left=waits_left))
            if waits_left > 0:
                await store.add_pending(waiting_again(bench, now, config.report_timeout_s))
                await store.release(bench.request_event_id)
            else:
                await store.finish(bench.request_event_id, bench.instance_id)

    async def sweep_forever() -> None:
        while True:
            await ctx.clock.sleep(config.sweep_interval_s)
            try:
                await report_overdue_requests()
            except Exception:  # Redis or NATS away: the next sweep retries; the requests stay pending
                ctx.log.exception("bench sweep of overdue requests failed")

    sweeper: list[asyncio.Task[None]] = []

    async def start_sweeper() -> None:
        sweeper.append(asyncio.create_task(sweep_forever()))

    async def stop_sweeper() -> None:
        await stop_tasks(sweeper)
        sweeper.clear()
        if redis is None:
            await redis_client.aclose()

    app = asgi_app(ctx)
    rate_limit = PerKeyRateLimit(config.report_burst, config.report_per_minute)
    intake = intake_app(on_report, config.report_token, metrics, config.report_max_bytes, rate_limit, ctx.clock)
    app.mount(SUITE_PATH, intake)
    app.mount(REPORT_PATH, intake)
    app.after_startup(start_sweeper)
    app.on_shutdown(stop_sweeper)
    return app


def create_app(settings: Settings | None = None) -> AsgiFastStream:
    """Entry point for `faststream run services.bench.app:create_app --factory` and `fleetpilot run bench`."""
    config = BenchSettings()
    if config.report_token is None or not config.report_token.get_secret_value():
        # without it every report is refused, every rented machine ends `unknown`: refuse to start instead
        exit_for_setting(
            "FLEETPILOT_BENCH_REPORT_TOKEN is not set: expected the token rented machines file their suite "
            "reports with (the same value for bench and the provisioner; e.g. `openssl rand -hex 24`)"
        )
    ctx = ServiceContext.from_settings(
        SERVICE, settings, secrets={"FLEETPILOT_BENCH_REPORT_TOKEN": config.report_token}
    )
    if is_live(ctx.settings) and config.cpu_reports != "fail":
        exit_for_setting(
            f"FLEETPILOT_BENCH_CPU_REPORTS={config.cpu_reports} would pass rented GPU machines that ran no GPU "
            "benchmark: refused in live mode (the real vast.ai API with FLEETPILOT_DECIDER_MODE=live); unset it"
        )
    return build(ctx, config)
