"""What bench does with a request and a report: wait for a rented machine's report and judge it, run the suite
here, sweep a serving endpoint, and give up on reports that never came. The wiring (services/bench/app.py)
subscribes and mounts; this holds the steps, each a method a test can call.
"""

from __future__ import annotations

import asyncio
import time

import httpx
from faststream.nats import NatsMessage
from pydantic import AnyHttpUrl, BaseModel

from services.bench import gpu_suite
from services.bench.collect import (
    missing_report_result,
    overdue,
    pending_from_request,
    result_event_id,
    waiting_again,
)
from services.bench.config import BenchSettings
from services.bench.intake import ReportOutcome
from services.bench.metrics import BenchMetrics
from services.bench.references import reference_for
from services.bench.report import SuiteReport
from services.bench.serving import run_sweep
from services.bench.serving_stats import serving_result, unreachable_result
from services.bench.store import BenchStore
from services.bench.verdict import gpu_result, judge_gpu, judge_rented
from shared.bus import publish_event
from shared.contract import BenchRequest, BenchResult
from shared.service import ServiceContext
from shared.streams import ACK_WAIT_S, BENCH

SERVICE = "bench"

# A serving sweep outlasts JetStream's ack wait; the handler says "still working" well within it.
IN_PROGRESS_EVERY_S = ACK_WAIT_S / 3


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


class BenchRequests:
    def __init__(self, ctx: ServiceContext, config: BenchSettings, store: BenchStore, metrics: BenchMetrics) -> None:
        self.ctx = ctx
        self.config = config
        self.store = store
        self.metrics = metrics
        self.thresholds = config.thresholds()

    async def publish(self, result: BenchResult) -> None:
        ctx = self.ctx
        await publish_event(ctx.broker, ctx.subjects.bench_result, result, stream=BENCH.name(ctx.subjects))
        self.metrics.results.labels(result.kind, result.verdict).inc()
        ctx.log.info("bench result for instance %s: %s", result.instance_id, result.explanation)

    # ---- a rented machine: its request and its report, in either order -------------------------------------
    async def complete_if_reported(self, instance_id: int) -> bool:
        """Publish the verdict when both the request and its label's report are in; either may come first."""
        store = self.store
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
            listed_num_gpus=pending.listed_num_gpus,
            thresholds=self.thresholds,
            cpu_reports=self.config.cpu_reports,
        )
        result = gpu_result(
            report,
            judgement,
            occurred_at=self.ctx.clock.now(),
            source=SERVICE,
            instance_id=instance_id,
            event_id=result_event_id(pending.request_event_id),
        )
        await self.publish(result)
        await store.finish(pending.request_event_id, instance_id)
        return True

    async def on_report(self, label: str, report: SuiteReport) -> ReportOutcome:
        """Kept only when no other machine's request waits on the instance it names, and only once per label."""
        assert report.instance_id is not None  # the intake refuses reports without one
        named = await self.store.pending(report.instance_id)
        if named is not None and named.label is not None and named.label != label:
            return ReportOutcome.MISMATCH
        if not await self.store.put_report(label, report):
            return ReportOutcome.DUPLICATE
        judged = await self.complete_if_reported(report.instance_id)
        return ReportOutcome.JUDGED if judged else ReportOutcome.STORED

    # ---- a request ---------------------------------------------------------------------------------------------
    async def handle(self, request: BenchRequest, message: NatsMessage) -> None:
        store = self.store
        if await store.is_done(request.event_id):
            self.ctx.metrics.duplicates_ignored.labels(SERVICE).inc()
            return
        if request.kind == "serving":
            await self.run_serving(request, message)
        elif request.instance_id is None:
            await self.run_local_gpu(request)
        else:
            await store.add_pending(pending_from_request(request, self.config.report_timeout_s))
            await self.complete_if_reported(request.instance_id)
            return  # finished by complete_if_reported, or later by a report or the sweep
        await store.finish(request.event_id)

    async def run_local_gpu(self, request: BenchRequest) -> None:
        started_s = time.perf_counter()
        report = await asyncio.to_thread(local_suite_report, self.config.local_min_time_s)
        self.metrics.run_duration.labels("gpu").observe(time.perf_counter() - started_s)
        judgement = judge_gpu(report, reference_for(report.gpu_name), self.thresholds)
        await self.publish(
            gpu_result(
                report,
                judgement,
                occurred_at=self.ctx.clock.now(),
                source=SERVICE,
                event_id=result_event_id(request.event_id),
            )
        )

    async def run_serving(self, request: BenchRequest, message: NatsMessage) -> None:
        ctx, config = self.ctx, self.config
        target = ServingTarget.model_validate({"url": request.url})
        heartbeat = asyncio.create_task(self._keep_in_progress(message))
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
            await self.publish(
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
        self.metrics.run_duration.labels("serving").observe(time.perf_counter() - started_s)
        await self.publish(
            serving_result(
                run, occurred_at=ctx.clock.now(), source=SERVICE, instance_id=request.instance_id, event_id=event_id
            )
        )

    async def _keep_in_progress(self, message: NatsMessage) -> None:
        while True:
            await self.ctx.clock.sleep(IN_PROGRESS_EVERY_S)
            await message.in_progress()

    # ---- reports that never came ---------------------------------------------------------------------------
    async def report_overdue_requests(self) -> None:
        """Each request past its deadline without a report: `unknown`, counted, and (retries left) waited on again."""
        store, config = self.store, self.config
        pending = await store.all_pending()
        self.metrics.pending_requests.set(len(pending))
        for bench in overdue(pending, self.ctx.clock.now()):
            if await self.complete_if_reported(bench.instance_id) or not await store.claim(bench.request_event_id):
                continue
            now = self.ctx.clock.now()
            waits_left = config.report_retries - bench.missed_reports
            self.metrics.reports_missing.inc()
            await self.publish(missing_report_result(bench, occurred_at=now, source=SERVICE, waits_left=waits_left))
            if waits_left > 0:
                await store.add_pending(waiting_again(bench, now, config.report_timeout_s))
                await store.release(bench.request_event_id)
            else:
                await store.finish(bench.request_event_id, bench.instance_id)

    async def sweep_forever(self) -> None:
        while True:
            await self.ctx.clock.sleep(self.config.sweep_interval_s)
            try:
                await self.report_overdue_requests()
            except Exception:  # Redis or NATS away: the next sweep retries; the requests stay pending
                self.ctx.log.exception("bench sweep of overdue requests failed")
