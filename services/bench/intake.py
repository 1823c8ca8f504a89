"""HTTP edge for rented machines: GET /bench/suite.py serves the suite, POST /bench/report takes its report.

Every rented host is a stranger, so a report is checked cheapest first and nothing is read or stored before
it has earned it: the per-instance bearer token (tokens.py) names the machine's label, the label's rate limit,
the declared and the actual body size, then the SuiteReport (a 422 names the field). The service decides
whether the report belongs to the request waiting for that label, and takes one report per label, once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import StrEnum

import pydantic
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from services.bench.metrics import BenchMetrics
from services.bench.rate_limit import PerKeyRateLimit
from services.bench.report import SuiteReport
from services.bench.suite_script import suite_script
from services.bench.tokens import bearer_label
from shared.clock import Clock

SUITE_PATH = "/bench/suite.py"
REPORT_PATH = "/bench/report"


class ReportOutcome(StrEnum):
    """What the service made of an authenticated, well-formed report."""

    STORED = "stored"  # kept for its label; judged now or when its request comes
    JUDGED = "judged"  # it completed a waiting request: a result was published
    DUPLICATE = "duplicate"  # this label already filed its report: a replay, refused
    MISMATCH = "mismatch"  # it names an instance whose request waits for another label


# (label proven by the token, the report) → what became of it
ReportHandler = Callable[[str, SuiteReport], Awaitable[ReportOutcome]]

REFUSALS: dict[ReportOutcome, tuple[int, str]] = {
    ReportOutcome.DUPLICATE: (409, "this machine's report was already taken; a report is accepted once"),
    ReportOutcome.MISMATCH: (403, "instance_id: the named instance's benchmark waits for another machine's report"),
}


async def capped_body(request: Request, max_bytes: int) -> bytes | None:
    """The body, or None as soon as it passes `max_bytes`: a lying or absent Content-Length reads no further."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def declared_too_large(request: Request, max_bytes: int) -> bool:
    declared = request.headers.get("content-length", "")
    return declared.isdigit() and int(declared) > max_bytes


def intake_app(
    on_report: ReportHandler,
    secret: SecretStr | None,
    metrics: BenchMetrics,
    max_bytes: int,
    rate_limit: PerKeyRateLimit,
    clock: Clock,
) -> Starlette:
    source = suite_script()

    def refused(outcome: str, status: int, error: str) -> Response:
        metrics.reports.labels(outcome).inc()
        return JSONResponse({"error": error}, status)

    async def serve_suite(request: Request) -> Response:
        return PlainTextResponse(source, media_type="text/x-python")

    async def receive_report(request: Request) -> Response:
        if secret is None or not secret.get_secret_value():
            return refused("disabled", 503, "report intake disabled: FLEETPILOT_BENCH_REPORT_TOKEN is not set")
        label = bearer_label(request.headers.get("authorization"), secret)
        if label is None:
            return refused("unauthorized", 401, "missing or wrong bearer token (expected this instance's own)")
        if not rate_limit.allow(label, clock.now().timestamp()):
            return refused("rate_limited", 429, "too many reports from this instance; retry later")
        too_large = f"report exceeds {max_bytes} bytes"
        if declared_too_large(request, max_bytes):
            return refused("too_large", 413, too_large)
        body = await capped_body(request, max_bytes)
        if body is None:
            return refused("too_large", 413, too_large)
        try:
            report = SuiteReport.model_validate_json(body)
        except pydantic.ValidationError as error:
            return refused("invalid", 422, str(error)[:2000])
        if report.instance_id is None:
            return refused("invalid", 422, "instance_id: required in a report sent over HTTP, got null")
        outcome = await on_report(label, report)
        if outcome in REFUSALS:
            return refused(outcome.value, *REFUSALS[outcome])
        metrics.reports.labels("accepted").inc()
        return JSONResponse({"accepted": True, "result_published": outcome is ReportOutcome.JUDGED}, 202)

    return Starlette(
        routes=[
            Route(SUITE_PATH, serve_suite, methods=["GET"]),
            Route(REPORT_PATH, receive_report, methods=["POST"]),
        ]
    )
