"""References per GPU model and the verdict against them: pass, degraded at half speed, fail when broken."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.bench.gpu_suite import MATMUL_BF16, MEMORY_COPY, SCHEMA, TASK
from services.bench.references import (
    SPEC_REFERENCES,
    GpuReference,
    Source,
    canonical_gpu_model,
    reference_for,
)
from services.bench.report import SuiteReport
from services.bench.verdict import Thresholds, gpu_result, judge_gpu, judge_rented
from shared.gpu_models import CATALOG

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
REQUIRED_MODELS = ("RTX 3090", "RTX 4090", "RTX 5090", "RTX PRO 6000", "A100 SXM4", "H100 SXM", "H200")
VERDICT_ORDER = {"pass": 0, "degraded": 1, "fail": 2}


def report_at(gpu_name: str, share: float, **changes: object) -> SuiteReport:
    """A CUDA report whose every metric is `share` of the model's expected values."""
    reference = reference_for(gpu_name)
    assert reference is not None
    fields: dict[str, object] = {
        "schema": SCHEMA,
        "instance_id": 33032712,
        "device": "cuda",
        "gpu_name": gpu_name,
        "gpu_count": 1,
        "metrics": {name: value * share for name, value in reference.expected_metrics().items()},
        "checks": {"matmul_bf16": True, "matmul_fp16": True, "memory_copy": True, "host_copy": True},
        "errors": [],
        "started_at": NOW,
        "duration_s": 30.0,
    }
    fields.update(changes)
    return SuiteReport.model_validate(fields)


@pytest.mark.parametrize("model", REQUIRED_MODELS)
def test_every_required_model_has_a_sourced_reference(model: str) -> None:
    reference = reference_for(model)
    assert reference is not None and reference.model == model
    assert reference.source.kind in ("spec", "measured")
    assert reference.source.document and reference.source.published and reference.source.method
    assert reference.source.recorded
    assert all(value > 0 for value in reference.expected_metrics().values())


@pytest.mark.parametrize(
    ("device_name", "model"),
    [
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Max-Q"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIE"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIE"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("RTX_4090", "RTX 4090"),
        ("NVIDIA RTX 6000 Ada Generation", None),
        ("Tesla T4", None),
        (None, None),
    ],
)
def test_device_and_offer_names_map_to_models(device_name: str | None, model: str | None) -> None:
    assert canonical_gpu_model(device_name) == model


def test_the_models_vast_lists_in_the_catalog_keep_their_names() -> None:
    for name in CATALOG:
        assert canonical_gpu_model(name) == name


def test_a_healthy_machine_passes_with_ratios_near_one() -> None:
    judgement = judge_gpu(report_at("NVIDIA GeForce RTX 4090", 1.0), reference_for("RTX 4090"), Thresholds())
    assert judgement.verdict == "pass"
    assert judgement.gpu_model == "RTX 4090"
    assert judgement.ratios[MATMUL_BF16] == pytest.approx(1.0)
    assert len(judgement.ratios) == 5


def test_a_machine_at_half_its_reference_is_degraded_with_its_ratios() -> None:
    report = report_at("NVIDIA GeForce RTX 4090", 0.5)
    judgement = judge_gpu(report, reference_for(report.gpu_name), Thresholds())
    assert judgement.verdict == "degraded"
    assert all(ratio == pytest.approx(0.5) for ratio in judgement.ratios.values())
    assert "matmul_bf16_tflops at 50%" in judgement.explanation and "below 80%" in judgement.explanation

    result = gpu_result(report, judgement, occurred_at=NOW, source="bench", event_id="bench-result-r1")
    assert result.verdict == "degraded" and result.instance_id == 33032712 and result.gpu_model == "RTX 4090"
    assert result.ratios_to_reference[MEMORY_COPY] == pytest.approx(0.5)
    assert result.event_id == "bench-result-r1"


def test_one_slow_metric_is_enough_to_degrade() -> None:
    reference = reference_for("H100 SXM")
    assert reference is not None
    report = report_at("NVIDIA H100 80GB HBM3", 1.0)
    slow_memory = {**report.metrics, MEMORY_COPY: report.metrics[MEMORY_COPY] * 0.6}
    judgement = judge_gpu(report.model_copy(update={"metrics": slow_memory}), reference, Thresholds())
    assert judgement.verdict == "degraded" and "memory_copy_gb_per_s at 60%" in judgement.explanation


def test_far_below_reference_fails() -> None:
    report = report_at("NVIDIA H200", 0.3)
    assert judge_gpu(report, reference_for("H200"), Thresholds()).verdict == "fail"


def test_an_error_or_a_wrong_result_fails_whatever_the_speed() -> None:
    erroring = report_at("NVIDIA H200", 1.0, errors=["memory_copy: RuntimeError: CUDA error: ECC error"])
    judgement = judge_gpu(erroring, reference_for("H200"), Thresholds())
    assert judgement.verdict == "fail" and "ECC error" in judgement.explanation

    wrong = report_at("NVIDIA H200", 1.0, checks={"matmul_bf16": False})
    assert judge_gpu(wrong, reference_for("H200"), Thresholds()).verdict == "fail"

    nothing = report_at("NVIDIA H200", 1.0, metrics={})
    assert judge_gpu(nothing, reference_for("H200"), Thresholds()).verdict == "fail"


def test_the_degraded_line_is_configurable() -> None:
    report = report_at("NVIDIA GeForce RTX 5090", 0.5)
    lenient = Thresholds(degraded_below_share=0.45, fail_below_share=0.2)
    assert judge_gpu(report, reference_for("RTX 5090"), lenient).verdict == "pass"


def test_thresholds_out_of_order_are_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=re.escape("fail_below_share=0.9, degraded_below_share=0.8")):
        Thresholds(degraded_below_share=0.8, fail_below_share=0.9)


def test_a_gpu_without_reference_is_judged_on_correctness_and_says_so() -> None:
    report = report_at("NVIDIA H200", 1.0).model_copy(update={"gpu_name": "Tesla T4"})
    judgement = judge_gpu(report, reference_for("Tesla T4"), Thresholds())
    assert judgement.verdict == "pass" and judgement.ratios == {}
    assert "no reference for this GPU" in judgement.explanation


def test_a_measured_reference_replaces_the_spec_and_a_slower_task_counts_against() -> None:
    spec = reference_for("H200")
    assert spec is not None
    measured = replace(
        spec,
        source=Source("measured", "gpu_suite on a lent H200", "2026-12-02", "python -m services.bench.gpu_suite"),
        task_s=100.0,
    )
    chosen = reference_for("NVIDIA H200", measured=(measured,))
    assert chosen is measured
    assert chosen.expected_metrics()[MATMUL_BF16] == spec.matmul_bf16_tflops  # measured values are taken as-is

    metrics = {**measured.expected_metrics(), TASK: 250.0}  # the real task took 2.5x as long
    report = report_at("NVIDIA H200", 1.0, metrics=metrics)
    judgement = judge_gpu(report, chosen, Thresholds())
    assert judgement.ratios[TASK] == pytest.approx(0.4)
    assert judgement.verdict == "degraded"


def test_spec_references_expect_less_than_the_peak() -> None:
    for reference in SPEC_REFERENCES:
        assert reference.expected_metrics()[MATMUL_BF16] < reference.matmul_bf16_tflops


@given(
    model=st.sampled_from(REQUIRED_MODELS),
    share=st.floats(min_value=0.0, max_value=2.0),
    slower=st.floats(min_value=0.0, max_value=1.0),
)
def test_a_slower_machine_never_gets_a_better_verdict(model: str, share: float, slower: float) -> None:
    reference: GpuReference | None = reference_for(model)
    assert reference is not None
    faster_verdict = judge_gpu(report_at(model, share), reference, Thresholds()).verdict
    slower_verdict = judge_gpu(report_at(model, share * slower), reference, Thresholds()).verdict
    assert VERDICT_ORDER[slower_verdict] >= VERDICT_ORDER[faster_verdict]


def test_a_report_that_leaves_out_a_metric_or_every_check_fails() -> None:
    """A host writes its own report: what it leaves out is no metric at 100% and no check passed."""
    reference = reference_for("RTX 4090")
    complete = report_at("RTX 4090", 1.0)
    assert judge_gpu(complete, reference, Thresholds()).verdict == "pass"
    fewer = {name: value for name, value in complete.metrics.items() if name != MEMORY_COPY}
    judgement = judge_gpu(report_at("RTX 4090", 1.0, metrics=fewer), reference, Thresholds())
    assert judgement.verdict == "fail" and MEMORY_COPY in judgement.explanation
    unchecked = judge_gpu(report_at("RTX 4090", 1.0, checks={}), reference, Thresholds())
    assert unchecked.verdict == "fail" and "check" in unchecked.explanation
    # the task time is measured only where the operator set a task: its absence alone is no failure
    without_task = {name: value for name, value in complete.metrics.items() if name != TASK}
    assert judge_gpu(report_at("RTX 4090", 1.0, metrics=without_task), reference, Thresholds()).verdict == "pass"


@pytest.mark.parametrize(
    ("shown", "listed", "verdict"), [(1, 4, "fail"), (3, 4, "fail"), (4, 4, "pass"), (8, 4, "pass")]
)
def test_a_machine_showing_fewer_gpus_than_vast_lists_fails(shown: int, listed: int, verdict: str) -> None:
    """Billed for every listed GPU, measured on the first: a dead or hidden GPU is caught only by the count."""
    report = report_at("RTX 4090", 1.0, gpu_count=shown)
    judgement = judge_rented(
        report, instance_id=33032712, listed_gpu_model="RTX 4090", thresholds=Thresholds(), listed_num_gpus=listed
    )
    assert judgement.verdict == verdict, judgement.explanation
    if verdict == "fail":
        plural = "" if shown == 1 else "s"
        assert judgement.explanation == f"RTX 4090: fail: the machine shows {shown} GPU{plural}, vast lists {listed}"
    # a request from before the count was listed (None) is judged on the model and the speed alone
    unlisted = judge_rented(report, instance_id=33032712, listed_gpu_model="RTX 4090", thresholds=Thresholds())
    assert unlisted.verdict == "pass"
