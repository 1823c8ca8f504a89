"""The GPU suite's shared driver on the CPU variant: a well-formed report, checked results, errors kept."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from services.bench import gpu_suite
from services.bench.gpu_suite import CopyTiming, NumpyCpuBackend, SuiteSizes, run_suite
from services.bench.report import SuiteReport
from services.bench.suite_script import SUITE_MODULES, suite_script
from services.bench.verdict import Thresholds, gpu_result, judge_gpu

SMALL = SuiteSizes(matmul_n=128, check_n=64, memory_bytes=2 << 20, host_copy_bytes=2 << 20, min_time_s=0.02)


class WrongMatmul(NumpyCpuBackend):
    """A device whose matmul returns garbage, as a GPU with bad memory or a broken driver does."""

    def matmul(self, dtype: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return super().matmul(dtype, a, b) * 1.5


class CorruptCopy(NumpyCpuBackend):
    def device_copy(self, nbytes: int, min_time_s: float) -> CopyTiming:
        timing = super().device_copy(nbytes, min_time_s)
        return CopyTiming(timing.seconds, timing.nbytes, intact=False)


class FailingHostLink(NumpyCpuBackend):
    def host_copies(self, nbytes: int, min_time_s: float) -> tuple[CopyTiming, CopyTiming]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_a_cpu_run_is_a_well_formed_report_judged_on_correctness() -> None:
    raw = run_suite(NumpyCpuBackend(), SMALL, instance_id=7)
    report = SuiteReport.model_validate(json.loads(json.dumps(raw)))  # as it travels: JSON

    assert report.device == "cpu" and report.instance_id == 7 and report.gpu_name is None
    assert set(report.metrics) == {
        gpu_suite.MATMUL_BF16,
        gpu_suite.MATMUL_FP16,
        gpu_suite.MEMORY_COPY,
        gpu_suite.HOST_TO_DEVICE,
        gpu_suite.DEVICE_TO_HOST,
    }
    assert all(value > 0 for value in report.metrics.values())
    assert report.checks == {"matmul_bf16": True, "matmul_fp16": True, "memory_copy": True, "host_copy": True}
    assert report.errors == []

    judgement = judge_gpu(report, None, Thresholds())
    assert judgement.verdict == "pass"
    assert judgement.ratios == {}
    assert "CPU run" in judgement.explanation and "correctness only" in judgement.explanation

    result = gpu_result(report, judgement, occurred_at=report.started_at, source="bench")
    assert result.device == "cpu" and result.kind == "gpu" and result.verdict == "pass"
    assert result.metrics == report.metrics and result.instance_id == 7


def test_a_wrong_matmul_fails_the_check_and_the_machine() -> None:
    report = SuiteReport.model_validate(run_suite(WrongMatmul(), SMALL))
    assert report.checks["matmul_bf16"] is False and report.checks["matmul_fp16"] is False
    assert any("relative error" in error for error in report.errors)
    assert judge_gpu(report, None, Thresholds()).verdict == "fail"


def test_a_corrupt_copy_is_a_failed_check_with_an_error() -> None:
    report = SuiteReport.model_validate(run_suite(CorruptCopy(), SMALL))
    assert report.checks["memory_copy"] is False
    assert "memory_copy: result differs from its source" in report.errors
    assert judge_gpu(report, None, Thresholds()).verdict == "fail"


def test_a_failing_step_is_recorded_and_the_rest_still_measured() -> None:
    report = SuiteReport.model_validate(run_suite(FailingHostLink(), SMALL))
    assert any(error.startswith("host_copy: RuntimeError: CUDA error") for error in report.errors)
    assert gpu_suite.MATMUL_BF16 in report.metrics and gpu_suite.HOST_TO_DEVICE not in report.metrics
    judgement = judge_gpu(report, None, Thresholds())
    assert judgement.verdict == "fail" and "illegal memory access" in judgement.explanation


def test_a_real_task_is_timed_and_a_failing_one_is_an_error() -> None:
    ok = run_suite(NumpyCpuBackend(), SMALL, task_command=f"{sys.executable} -c 'pass'")
    assert ok["metrics"][gpu_suite.TASK] > 0 and ok["errors"] == []
    failed = run_suite(NumpyCpuBackend(), SMALL, task_command="exit 3")
    assert any("task exited with 3" in error for error in failed["errors"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, 1.0),
        (1.0 + 2.0**-9, 1.0),  # below half a step (bf16 steps by 2^-7 near 1): down
        (1.0 + 2.0**-8 + 2.0**-12, 1.0 + 2.0**-7),  # above half a step: up
        (1.0 + 2.0**-8, 1.0),  # a tie goes to the even mantissa (0)
        (1.0 + 3 * 2.0**-8, 1.0 + 2.0**-6),  # a tie goes to the even mantissa (2, not 1)
        (-2.5, -2.5),
    ],
)
def test_bf16_rounding_is_to_nearest_even_like_a_cast(value: float, expected: float) -> None:
    rounded = gpu_suite.round_to_bf16(np.array([value], dtype=np.float32))
    assert float(rounded[0]) == expected


def test_the_instance_id_comes_from_vast_environment() -> None:
    assert gpu_suite.instance_id_from_environment({"CONTAINER_ID": "33032712"}) == 33032712
    assert gpu_suite.instance_id_from_environment({"VAST_CONTAINERLABEL": "C.33032712"}) == 33032712
    assert gpu_suite.instance_id_from_environment({"CONTAINER_ID": "abc"}) is None


def test_asking_for_cuda_where_it_is_unusable_reports_a_failure_not_a_cpu_pass() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "services.bench.gpu_suite", "--device", "cuda", "--instance-id", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = SuiteReport.model_validate_json(completed.stdout.strip().splitlines()[-1])
    if report.errors:  # no usable CUDA here (the usual case on CI machines)
        assert completed.returncode == 1
        assert report.device == "cuda" and report.metrics == {}
        assert report.errors[0].startswith("CUDA unusable")
        assert judge_gpu(report, None, Thresholds()).verdict == "fail"
    else:  # a machine with a working GPU: the CUDA path itself ran
        assert report.device == "cuda" and report.gpu_name


def test_the_served_script_holds_every_module_and_imports_nothing_of_the_project() -> None:
    """A rented machine has the one downloaded file: a module left out, or an import of the project, breaks it
    there only (here the project is installed, so running the script would not tell)."""
    package_dir = Path(gpu_suite.__file__).parent
    assert {path.stem for path in package_dir.glob("*.py")} == {"__init__", *SUITE_MODULES}
    imported: set[str] = set()
    for node in ast.walk(ast.parse(suite_script())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"numpy", "torch"}
