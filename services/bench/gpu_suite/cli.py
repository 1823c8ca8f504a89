"""The command line a rented machine runs: the suite, its report printed, then posted to the bench service."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from services.bench.gpu_suite.backend import SuiteSizes
from services.bench.gpu_suite.driver import run_suite, select_backend, unusable_report

REPORT_ATTEMPTS = 6
REPORT_FIRST_BACKOFF_S = 2.0
REPORT_TIMEOUT_S = 15.0


def instance_id_from_environment(environ: dict[str, str]) -> int | None:
    """vast.ai sets CONTAINER_ID (the instance id) and VAST_CONTAINERLABEL ("C.<id>") inside instances."""
    for raw in (environ.get("CONTAINER_ID", ""), environ.get("VAST_CONTAINERLABEL", "").removeprefix("C.")):
        if raw.strip().isdigit():
            return int(raw.strip())
    return None


def post_report(url: str, report: dict[str, Any], token: str | None) -> int:
    """POST the report, retrying with exponential backoff; returns the HTTP status of the accepted post."""
    body = json.dumps(report).encode()
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    backoff_s = REPORT_FIRST_BACKOFF_S
    last_error = "no attempt"
    for attempt in range(1, REPORT_ATTEMPTS + 1):
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=REPORT_TIMEOUT_S) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            if error.code in (400, 401, 403, 422):  # the report or token is wrong: retrying cannot help
                raise RuntimeError(f"report refused with HTTP {error.code}: {error.read()[:300]!r}") from error
            last_error = f"HTTP {error.code}"
        except (urllib.error.URLError, OSError) as error:
            last_error = f"{type(error).__name__}: {error}"
        if attempt < REPORT_ATTEMPTS:
            time.sleep(backoff_s)
            backoff_s *= 2
    raise RuntimeError(f"report not delivered after {REPORT_ATTEMPTS} attempts: {last_error}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="FleetPilot GPU benchmark suite")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--instance-id", type=int, default=None, help="default: $CONTAINER_ID on vast.ai")
    parser.add_argument("--report-url", default=None, help="POST the report here (the bench service)")
    parser.add_argument("--min-time-s", type=float, default=None, help="least time per measurement")
    parser.add_argument("--task-command", default=None, help="one real task of the workload, timed end to end")
    parser.add_argument("--task-timeout-s", type=float, default=1800.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    instance_id = args.instance_id if args.instance_id is not None else instance_id_from_environment(dict(os.environ))
    backend, unusable = select_backend(args.device)
    if backend is None:
        report = unusable_report(unusable or "no backend", instance_id)
    else:
        sizes = SuiteSizes.for_device(backend.device, args.min_time_s)
        report = run_suite(
            backend,
            sizes,
            instance_id=instance_id,
            task_command=args.task_command,
            task_timeout_s=args.task_timeout_s,
        )
    print(json.dumps(report), flush=True)
    if args.report_url:
        try:
            post_report(args.report_url, report, os.environ.get("FLEETPILOT_BENCH_TOKEN"))
        except RuntimeError as error:
            print(f"gpu_suite: {error}", file=sys.stderr)
            return 2
    return 1 if report["errors"] else 0
