"""Meeting a GPU bench request with its instance's report, whichever arrives first, and giving up in time.

The suite runs at container start and usually reports before fleet asks; a request waits for the report
until its deadline. A missing report is not a failed benchmark (the onstart may not have run, the intake may
be unreachable): the verdict is `unknown`, the wait starts again, and after `report_retries` waits bench stops
waiting. A report that comes later is still judged. A result's event id derives from the request's, so a
request handled twice (redelivery, a report racing a request) publishes one event after JetStream's
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
    missed_reports: int = Field(default=0, ge=0, description="deadlines passed without a report so far")
    label: str | None = Field(
        default=None, max_length=256, description="the instance's label: only the report its token proves is judged"
    )
    listed_gpu_model: str | None = Field(
        default=None, max_length=64, description="the GPU vast lists for the instance: what it is judged against"
    )
    listed_num_gpus: int | None = Field(
        default=None, ge=1, le=64, description="how many GPUs vast lists for it: the report must show as many"
    )


def pending_from_request(request: BenchRequest, report_timeout_s: float) -> PendingGpuBench:
    if request.instance_id is None:
        raise ValueError("a pending GPU bench needs the request's instance_id, got None")
    return PendingGpuBench(
        request_event_id=request.event_id,
        instance_id=request.instance_id,
        requested_at=request.occurred_at,
        deadline=request.occurred_at + timedelta(seconds=report_timeout_s),
        label=request.label,
        listed_gpu_model=request.gpu_model,
        listed_num_gpus=request.num_gpus,
    )


def result_event_id(request_event_id: str) -> str:
    return f"bench-result-{request_event_id}"[:128]


def overdue(pending: list[PendingGpuBench], now: datetime) -> list[PendingGpuBench]:
    return [bench for bench in pending if bench.deadline <= now]


def waiting_again(bench: PendingGpuBench, now: datetime, report_timeout_s: float) -> PendingGpuBench:
    """The same request after a missed deadline: one more miss counted, a new deadline from now."""
    return bench.model_copy(
        update={"missed_reports": bench.missed_reports + 1, "deadline": now + timedelta(seconds=report_timeout_s)}
    )


def missing_report_result(
    bench: PendingGpuBench, *, occurred_at: datetime, source: str, waits_left: int
) -> BenchResult:
    """`unknown`, never `fail`: nothing was measured, so nothing may be failed or destroyed for it."""
    waited_s = (occurred_at - bench.requested_at).total_seconds()
    miss = bench.missed_reports + 1
    then = f"waiting again ({waits_left} more)" if waits_left > 0 else "no longer waiting"
    return BenchResult(
        # one event per miss: each must get through JetStream's de-duplication, and the real verdict after them
        event_id=f"{result_event_id(bench.request_event_id)}-unknown-{miss}"[:128],
        occurred_at=occurred_at,
        source=source,
        instance_id=bench.instance_id,
        kind="gpu",
        device="cuda",
        verdict="unknown",
        error=f"no suite report from instance {bench.instance_id} within {waited_s:.0f} s of the request",
        explanation=(
            f"instance {bench.instance_id}: unknown: the GPU suite has not reported ({miss} missed deadline(s); "
            f"check the onstart line and that the instance reaches bench's intake); {then}"
        ),
    )
