"""The verdict on a GPU suite report: pass, degraded or fail against its model's reference, with the ratios.

A ratio is performance relative to the reference (1.0 = as expected, higher is better; for a duration such
as `task_s` it is reference / measured). A CPU run, or a GPU no reference covers, is judged on correctness
alone: its verdict says the machine computes right, its explanation says no speed was judged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from services.bench.gpu_suite import TASK
from services.bench.references import GpuReference, canonical_gpu_model, reference_for
from services.bench.report import SuiteReport
from shared.contract import BenchResult
from shared.contract.bench import BenchVerdict

LOWER_IS_BETTER = frozenset({TASK})
EXPLANATION_MAX_CHARS = 1000
# A spec reference expects 75% of the vendor's peak, a measured one what a healthy card did: twice that is
# 150% of the peak, which no card reaches. A ratio above it is a made-up number, and a lying machine fails.
IMPLAUSIBLE_ABOVE_RATIO = 2.0

# What a CPU run from a rented GPU machine earns: the real onstart says `--device cuda`, so only a broken or
# lying machine sends one ("fail"); the demo's GPU-less stand-in machines run the CPU suite on purpose.
CpuReports = Literal["fail", "correctness_only"]


@dataclass(frozen=True)
class Thresholds:
    # Below 80% of reference a rented machine costs as much as a good one for four fifths of the work or less.
    degraded_below_share: float = 0.8
    # Below 40% something is broken (a throttled, power-capped or x1-linked card), not merely slower.
    fail_below_share: float = 0.4

    def __post_init__(self) -> None:
        if not 0 < self.fail_below_share <= self.degraded_below_share:
            raise ValueError(
                f"thresholds need 0 < fail_below_share <= degraded_below_share, got "
                f"fail_below_share={self.fail_below_share}, degraded_below_share={self.degraded_below_share}"
            )


@dataclass(frozen=True)
class Judgement:
    verdict: BenchVerdict
    ratios: dict[str, float]
    explanation: str
    gpu_model: str | None


def ratios_to_reference(measured: dict[str, float], expected: dict[str, float]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for name, reference in expected.items():
        if name not in measured or reference <= 0:
            continue
        value = measured[name]
        if name in LOWER_IS_BETTER:
            ratios[name] = reference / value if value > 0 else 0.0
        else:
            ratios[name] = value / reference
    return ratios


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.0f}%"


def judge_gpu(report: SuiteReport, reference: GpuReference | None, thresholds: Thresholds) -> Judgement:
    """Fail on any error or wrong result, then compare every referenced metric; the worst one decides."""
    model = canonical_gpu_model(report.gpu_name) if report.device == "cuda" else None
    label = model or report.gpu_name or report.device
    if report.errors or report.failed_checks:
        problems = [*report.errors, *(f"check {name} failed" for name in report.failed_checks)]
        return Judgement("fail", {}, f"{label}: fail: " + "; ".join(problems), model)
    if not report.metrics:
        return Judgement("fail", {}, f"{label}: fail: nothing was measured", model)
    if not report.checks:
        # the suite checks every result it times: a report without checks says nothing of correctness
        return Judgement("fail", {}, f"{label}: fail: no correctness check was reported", model)
    if report.device == "cpu" or reference is None:
        why = "no GPU reference applies to a CPU run" if report.device == "cpu" else "no reference for this GPU"
        return Judgement("pass", {}, f"{label}: {why}: judged on correctness only (all checks passed)", model)
    # a metric left out is no metric at 100%: the suite measures them all (the task time only when one is set)
    expected = reference.expected_metrics()
    missing = sorted(name for name in expected if name != TASK and name not in report.metrics)
    if missing:
        return Judgement("fail", {}, f"{label}: fail: {', '.join(missing)} not reported", model)

    ratios = ratios_to_reference(report.metrics, expected)
    implausible = {name: r for name, r in ratios.items() if r > IMPLAUSIBLE_ABOVE_RATIO}
    if implausible:
        listed = ", ".join(f"{name} at {_percent(r)}" for name, r in sorted(implausible.items()))
        most = _percent(IMPLAUSIBLE_ABOVE_RATIO)
        text = f"{label}: fail: {listed} of the reference is beyond what this GPU can do (above {most})"
        return Judgement("fail", {}, text, model)
    failing = {name: r for name, r in ratios.items() if r < thresholds.fail_below_share}
    degraded = {name: r for name, r in ratios.items() if r < thresholds.degraded_below_share}
    basis = f"{reference.source.kind} reference"
    if failing:
        verdict: BenchVerdict = "fail"
        worst, limit = failing, thresholds.fail_below_share
    elif degraded:
        verdict, worst, limit = "degraded", degraded, thresholds.degraded_below_share
    else:
        lowest = min(ratios.values(), default=1.0)
        text = f"{label}: pass: every metric at {_percent(lowest)} or more of the {basis}"
        return Judgement("pass", ratios, text, model)
    below = ", ".join(f"{name} at {_percent(r)}" for name, r in sorted(worst.items(), key=lambda item: item[1]))
    text = f"{label}: {verdict}: {below} of the {basis} (below {_percent(limit)})"
    return Judgement(verdict, ratios, text, model)


def judge_rented(
    report: SuiteReport,
    *,
    instance_id: int,
    listed_gpu_model: str | None,
    thresholds: Thresholds,
    cpu_reports: CpuReports = "fail",
    listed_num_gpus: int | None = None,
) -> Judgement:
    """A rented machine's report, judged against the GPU vast lists for it: the host's own claims decide nothing.

    Unknown or unlisted models fail: without a reference any numbers would pass, and a pass lets a machine in.
    A machine that shows fewer GPUs than vast lists (one dead, or hidden from the container) fails too: it is
    billed for all of them and the suite measures only the first, so its speed says nothing of the missing ones.
    """
    listed = canonical_gpu_model(listed_gpu_model)
    if report.instance_id != instance_id:
        why = f"the report names instance {report.instance_id} but came with instance {instance_id}'s token"
        return Judgement("fail", {}, f"{listed or listed_gpu_model}: fail: {why}", listed)
    if report.device == "cpu":
        if cpu_reports == "correctness_only":
            return judge_gpu(report, None, thresholds)
        return Judgement("fail", {}, f"{listed or listed_gpu_model}: fail: a CPU run from a rented GPU machine", listed)
    reference = reference_for(listed_gpu_model)
    if listed is None or reference is None:
        why = f"no reference for the listed GPU {listed_gpu_model!r}" if listed_gpu_model else "vast lists no GPU"
        return Judgement("fail", {}, f"{report.gpu_name}: fail: {why}", None)
    claimed = canonical_gpu_model(report.gpu_name)
    if claimed != listed:
        return Judgement(
            "fail", {}, f"{listed}: fail: the machine reports {report.gpu_name!r}, vast lists {listed}", listed
        )
    if listed_num_gpus is not None and report.gpu_count < listed_num_gpus:
        shown = f"{report.gpu_count} GPU" + ("" if report.gpu_count == 1 else "s")
        return Judgement("fail", {}, f"{listed}: fail: the machine shows {shown}, vast lists {listed_num_gpus}", listed)
    return replace(judge_gpu(report, reference, thresholds), gpu_model=listed)


def gpu_result(
    report: SuiteReport,
    judgement: Judgement,
    *,
    occurred_at: datetime,
    source: str,
    instance_id: int | None = None,
    event_id: str | None = None,
) -> BenchResult:
    """The BenchResult for a judged report; `event_id` is given when retries must publish the same event."""
    errors = "; ".join(report.errors) or None
    fields = {"event_id": event_id} if event_id else {}
    return BenchResult(
        **fields,
        occurred_at=occurred_at,
        source=source,
        instance_id=instance_id if instance_id is not None else report.instance_id,
        kind="gpu",
        device=report.device,
        gpu_model=judgement.gpu_model or report.gpu_name,
        verdict=judgement.verdict,
        metrics=dict(report.metrics),
        ratios_to_reference=judgement.ratios,
        error=errors[:2000] if errors else None,
        explanation=judgement.explanation[:EXPLANATION_MAX_CHARS],
    )
