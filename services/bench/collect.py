"""Meeting a GPU bench request with its instance's report, whichever arrives first, and giving up in time.

The suite runs at container start and usually reports before fleet asks; a request waits for the report
until its deadline, then the instance fails with "no report". A result's event id derives from the request's,
so a request handled twice (redelivery, a report racing a request) publishes one event after JetStream's
de-duplication.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from shared.contract import BenchRequest, BenchResult
from shared.contract.base import ContractModel, UtcDatetime

# How long a request waits for its instance's report: image pull and the suite itself come first.
DEFAULT_REPORT_TIMEOUT_S = 1800.0


class PendingGpuBench(ContractModel):
    """A GPU bench request still waiting for its instance's report (kept in Redis)."""

    request_event_id: str = Field(min_length=1, max_length=128)
    instance_id: int
    requested_at: UtcDatetime
    deadline: UtcDatetime


def pending_from_request(request: BenchRequest, report_timeout_s: float) -> PendingGpuBench:
    if request.instance_id is None:
        raise ValueError("a pending GPU bench needs the request's instance_id, got None")
    return PendingGpuBench(
        request_event_id=request.event_id,
        instance_id=request.instance_id,
        requested_at=request.occurred_at,
        deadline=request.occurred_at + timedelta(seconds=report_timeout_s),
    )


def result_event_id(request_event_id: str) -> str:
    return f"bench-result-{request_event_id}"[:128]


def overdue(pending: list[PendingGpuBench], now: datetime) -> list[PendingGpuBench]:
    return [bench for bench in pending if bench.deadline <= now]


def missing_report_result(bench: PendingGpuBench, *, occurred_at: datetime, source: str) -> BenchResult:
    waited_s = (bench.deadline - bench.requested_at).total_seconds()
    return BenchResult(
        event_id=result_event_id(bench.request_event_id),
        occurred_at=occurred_at,
        source=source,
        instance_id=bench.instance_id,
        kind="gpu",
        device="cuda",
        verdict="fail",
        error=f"no suite report from instance {bench.instance_id} within {waited_s:.0f} s of the request",
        explanation=f"instance {bench.instance_id}: fail: the GPU suite never reported (onstart failed or blocked)",
    )
