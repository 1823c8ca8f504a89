"""HTTP edge for rented machines: GET /bench/suite.py serves the suite, POST /bench/report takes its report.

A report must carry `Authorization: Bearer <FLEETPILOT_BENCH_REPORT_TOKEN>`; it is validated as a
SuiteReport (a 422 names the field) and handed to the service, which judges it when its request is there.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path

import pydantic
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from services.bench import gpu_suite
from services.bench.metrics import BenchMetrics
from services.bench.report import SuiteReport

SUITE_PATH = "/bench/suite.py"
REPORT_PATH = "/bench/report"

# Returns whether the report completed a waiting request (and a result was published).
ReportHandler = Callable[[int, SuiteReport], Awaitable[bool]]


def suite_source() -> str:
    return Path(gpu_suite.__file__).read_text(encoding="utf-8")


def token_matches(header: str | None, token: SecretStr) -> bool:
    presented = (header or "").removeprefix("Bearer ").strip()
    return hmac.compare_digest(presented.encode(), token.get_secret_value().encode())


def intake_app(on_report: ReportHandler, token: SecretStr | None, metrics: BenchMetrics, max_bytes: int) -> Starlette:
    source = suite_source()

    async def serve_suite(request: Request) -> Response:
        return PlainTextResponse(source, media_type="text/x-python")

    async def receive_report(request: Request) -> Response:
        if token is None or not token.get_secret_value():
            metrics.reports.labels("disabled").inc()
            return JSONResponse({"error": "report intake disabled: FLEETPILOT_BENCH_REPORT_TOKEN is not set"}, 503)
        if not token_matches(request.headers.get("authorization"), token):
            metrics.reports.labels("unauthorized").inc()
            return JSONResponse({"error": "missing or wrong bearer token"}, 401)
        body = await request.body()
        if len(body) > max_bytes:
            metrics.reports.labels("too_large").inc()
            return JSONResponse({"error": f"report of {len(body)} bytes exceeds {max_bytes}"}, 413)
        try:
            report = SuiteReport.model_validate_json(body)
        except pydantic.ValidationError as error:
            metrics.reports.labels("invalid").inc()
            return JSONResponse({"error": str(error)[:2000]}, 422)
        if report.instance_id is None:
            metrics.reports.labels("invalid").inc()
            return JSONResponse({"error": "instance_id: required in a report sent over HTTP, got null"}, 422)
        completed = await on_report(report.instance_id, report)
        metrics.reports.labels("accepted").inc()
        return JSONResponse({"accepted": True, "result_published": completed}, 202)

    return Starlette(
        routes=[
            Route(SUITE_PATH, serve_suite, methods=["GET"]),
            Route(REPORT_PATH, receive_report, methods=["POST"]),
        ]
    )
