"""The driver: picks the backend, measures and checks everything on it, and builds the report."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from services.bench.gpu_suite.backend import Backend, SuiteSizes, matmul_relative_error
from services.bench.gpu_suite.cpu import NumpyCpuBackend
from services.bench.gpu_suite.cuda import TorchCudaBackend, nvidia_smi_facts

SCHEMA = "fleetpilot.gpu_suite/1"

# Metric names: the bench service's references use the same keys.
MATMUL_BF16 = "matmul_bf16_tflops"
MATMUL_FP16 = "matmul_fp16_tflops"
MEMORY_COPY = "memory_copy_gb_per_s"
HOST_TO_DEVICE = "host_to_device_gb_per_s"
DEVICE_TO_HOST = "device_to_host_gb_per_s"
TASK = "task_s"

# Norm-wise relative error allowed against a float64 reference computed from the same rounded inputs. The
# error left is the output rounding (2^-9 for bf16, 2^-12 for fp16, on average) plus fp32 accumulation; the
# limits sit 4x above that, while a broken kernel or bad memory gives errors near 1.
MATMUL_TOLERANCE = {"bf16": 2.0**-6, "fp16": 2.0**-8}


def gpu_visible() -> bool:
    """A GPU the driver exposes, whether or not torch can use it (a broken CUDA setup must fail, not pass)."""
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def select_backend(device: str) -> tuple[Backend | None, str | None]:
    """The backend for `device` ('auto', 'cuda', 'cpu'), or None and the reason CUDA is unusable."""
    if device == "cpu":
        return NumpyCpuBackend(), None
    try:
        return TorchCudaBackend(), None
    except Exception as error:  # ImportError, a CUDA init failure, a driver mismatch: all are reasons
        reason = f"CUDA unusable: {type(error).__name__}: {error}"
    if device == "auto" and not gpu_visible():
        return NumpyCpuBackend(), None
    return None, reason


def measure(errors: list[str], step: str, action: Callable[[], None]) -> None:
    """Run one measurement; an exception becomes an error in the report and the suite goes on."""
    try:
        action()
    except Exception as error:
        errors.append(f"{step}: {type(error).__name__}: {error}"[:500])


def run_task(command: str, timeout_s: float) -> float:
    """Seconds one real task of the workload takes end to end (a non-zero exit is an error)."""
    start = time.perf_counter()
    completed = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout_s, check=False)
    elapsed_s = time.perf_counter() - start
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout or "").strip()[-300:]
        raise RuntimeError(f"task exited with {completed.returncode}: {tail}")
    return elapsed_s


def run_suite(
    backend: Backend,
    sizes: SuiteSizes,
    *,
    instance_id: int | None = None,
    task_command: str | None = None,
    task_timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Measure everything on `backend` and return the report (a JSON-ready dict, schema `SCHEMA`)."""
    started_at = datetime.now(UTC)
    start = time.perf_counter()
    metrics: dict[str, float] = {}
    checks: dict[str, bool] = {}
    errors: list[str] = []

    for dtype, metric in (("bf16", MATMUL_BF16), ("fp16", MATMUL_FP16)):

        def check_matmul(dtype: str = dtype) -> None:
            error = matmul_relative_error(backend, dtype, sizes.check_n)
            checks[f"matmul_{dtype}"] = error <= MATMUL_TOLERANCE[dtype]
            if not checks[f"matmul_{dtype}"]:
                errors.append(f"matmul_{dtype}: relative error {error:.3g} above {MATMUL_TOLERANCE[dtype]:.3g}")

        def time_matmul(dtype: str = dtype, metric: str = metric) -> None:
            seconds = backend.seconds_per_matmul(dtype, sizes.matmul_n, sizes.min_time_s)
            metrics[metric] = 2.0 * sizes.matmul_n**3 / seconds / 1e12

        measure(errors, f"matmul_{dtype} check", check_matmul)
        measure(errors, f"matmul_{dtype}", time_matmul)

    def time_memory() -> None:
        copy = backend.device_copy(sizes.memory_bytes, sizes.min_time_s)
        # A copy reads and writes every byte: the convention of CUDA's bandwidthTest for device-to-device.
        metrics[MEMORY_COPY] = 2.0 * copy.nbytes / copy.seconds / 1e9
        checks["memory_copy"] = copy.intact

    def time_host_link() -> None:
        to_device, to_host = backend.host_copies(sizes.host_copy_bytes, sizes.min_time_s)
        metrics[HOST_TO_DEVICE] = to_device.nbytes / to_device.seconds / 1e9
        metrics[DEVICE_TO_HOST] = to_host.nbytes / to_host.seconds / 1e9
        checks["host_copy"] = to_device.intact and to_host.intact

    measure(errors, "memory_copy", time_memory)
    measure(errors, "host_copy", time_host_link)
    if task_command:

        def time_task() -> None:
            metrics[TASK] = run_task(task_command, task_timeout_s)

        measure(errors, "task", time_task)
    for name, intact in checks.items():
        if not intact and not any(e.startswith(name) for e in errors):
            errors.append(f"{name}: result differs from its source")

    facts: dict[str, str] = {}
    measure(errors, "facts", lambda: facts.update(backend.facts()))
    return {
        "schema": SCHEMA,
        "instance_id": instance_id,
        "device": backend.device,
        "gpu_name": backend.gpu_name(),
        "gpu_count": backend.gpu_count(),
        "metrics": metrics,
        "checks": checks,
        "errors": errors,
        "facts": facts,
        "started_at": started_at.isoformat(),
        "duration_s": time.perf_counter() - start,
    }


def unusable_report(reason: str, instance_id: int | None) -> dict[str, Any]:
    """The report of a machine whose GPU cannot be used at all: nothing measured, one error."""
    return {
        "schema": SCHEMA,
        "instance_id": instance_id,
        "device": "cuda",
        "gpu_name": None,
        "gpu_count": 0,
        "metrics": {},
        "checks": {},
        "errors": [reason[:500]],
        "facts": nvidia_smi_facts(),
        "started_at": datetime.now(UTC).isoformat(),
        "duration_s": 0.0,
    }
