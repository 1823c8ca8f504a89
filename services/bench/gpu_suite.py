"""The GPU benchmark suite a rented machine runs at start: matmul TFLOP/s, memory and host-link bandwidth.

Self-contained on purpose (stdlib + numpy, torch imported lazily): the bench service serves this one file at
GET /bench/suite.py, vast's `onstart` fetches and runs it in the background, and it reports back over HTTP:
it prints its report as one JSON line on stdout and, given --report-url, POSTs the same JSON there with
`Authorization: Bearer $FLEETPILOT_BENCH_TOKEN`, retrying with backoff. It never talks to NATS: a rented
third-party machine gets no bus credentials, only a token that can do nothing but file a report. The
instance id comes from --instance-id or vast's `CONTAINER_ID` / `VAST_CONTAINERLABEL` ("C.<id>").

With PyTorch on CUDA it measures GPU 0 with CUDA events after warm-up; without a GPU (or with --device cpu)
the same driver runs a numpy variant labelled "cpu", whose bf16/fp16 figures are float32 BLAS on inputs
rounded to bf16/fp16 (numpy has no bf16 and its fp16 matmul bypasses BLAS). Every measurement is checked:
matmuls against a float64 reference, copies byte for byte; a wrong result is a failed check, not a number.

    python gpu_suite.py --device cuda --report-url https://bench.example/bench/report
    python -m services.bench.gpu_suite --device cpu
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

try:
    import numpy as np
except ImportError:  # the bench service imports this file for its names and serves it as text; only running
    np = None  # type: ignore[assignment]  # the suite needs numpy, which the machines it runs on have

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

REPORT_ATTEMPTS = 6
REPORT_FIRST_BACKOFF_S = 2.0
REPORT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class SuiteSizes:
    """How much work each measurement does; larger sizes reach a GPU's sustained rate (and its throttling)."""

    matmul_n: int
    check_n: int
    memory_bytes: int
    host_copy_bytes: int
    min_time_s: float

    @classmethod
    def for_device(cls, device: str, min_time_s: float | None = None) -> SuiteSizes:
        if device == "cuda":
            # 8192^3 bf16 is ~1.1 TFLOP per call: large enough to saturate an H200, small enough for an RTX 3090.
            return cls(8192, 1024, 1 << 30, 256 << 20, 1.0 if min_time_s is None else min_time_s)
        return cls(384, 128, 64 << 20, 32 << 20, 0.2 if min_time_s is None else min_time_s)


@dataclass(frozen=True)
class CopyTiming:
    """One copy's time, the bytes it moved (a GPU short of memory copies less) and whether it arrived intact."""

    seconds: float
    nbytes: int
    intact: bool


class Backend(Protocol):
    """One device's primitives; the driver (`run_suite`) is shared, so a CPU run exercises the same code."""

    device: str

    def gpu_name(self) -> str | None: ...

    def gpu_count(self) -> int: ...

    def facts(self) -> dict[str, str]: ...

    def matmul(self, dtype: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b with inputs cast to `dtype` on the device, returned as float64 for checking."""
        ...

    def seconds_per_matmul(self, dtype: str, n: int, min_time_s: float) -> float: ...

    def device_copy(self, nbytes: int, min_time_s: float) -> CopyTiming:
        """One device-to-device copy of up to `nbytes`."""
        ...

    def host_copies(self, nbytes: int, min_time_s: float) -> tuple[CopyTiming, CopyTiming]:
        """One host-to-device and one device-to-host copy; `intact` says whether the round trip is."""
        ...


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32: what a cast to bf16 keeps."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def round_to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return round_to_bf16(values)
    if dtype == "fp16":
        return values.astype(np.float16).astype(np.float32)
    raise ValueError(f"unknown matmul dtype {dtype!r}; expected 'bf16' or 'fp16'")


def matmul_relative_error(backend: Backend, dtype: str, n: int, seed: int = 7) -> float:
    """Norm-wise relative error of the device's matmul against float64 on the same rounded inputs."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, (n, n)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, (n, n)).astype(np.float32)
    expected = round_to_dtype(a, dtype).astype(np.float64) @ round_to_dtype(b, dtype).astype(np.float64)
    measured = backend.matmul(dtype, a, b)
    if measured.shape != expected.shape or not np.all(np.isfinite(measured)):
        return math.inf
    return float(np.linalg.norm(measured - expected) / np.linalg.norm(expected))


def repeat_until(run_batch: Callable[[int], float], min_time_s: float, max_iters: int = 1 << 16) -> float:
    """Seconds per iteration from a batch long enough to last `min_time_s` (sustained, not burst, speed).

    `run_batch(iters)` runs `iters` iterations and returns their total seconds; batches grow until one lasts.
    """
    iters = 1
    while True:
        elapsed_s = run_batch(iters)
        if elapsed_s >= min_time_s or iters >= max_iters:
            return elapsed_s / iters
        grow = min_time_s / max(elapsed_s, 1e-9) * 1.2
        iters = min(max_iters, max(iters * 2, math.ceil(iters * grow)))


class NumpyCpuBackend:
    """The CPU variant: the same measurements with numpy, so tests run the suite without a GPU."""

    device = "cpu"

    def gpu_name(self) -> str | None:
        return None

    def gpu_count(self) -> int:
        return 0

    def facts(self) -> dict[str, str]:
        return {
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": str(os.cpu_count() or 0),
            "numpy": np.__version__,
            "matmul_method": "float32 BLAS on bf16/fp16-rounded inputs",
        }

    def matmul(self, dtype: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        product = round_to_dtype(a, dtype) @ round_to_dtype(b, dtype)
        return round_to_dtype(product, dtype).astype(np.float64)

    def seconds_per_matmul(self, dtype: str, n: int, min_time_s: float) -> float:
        rng = np.random.default_rng(1)
        a = round_to_dtype(rng.standard_normal((n, n), dtype=np.float32), dtype)
        b = round_to_dtype(rng.standard_normal((n, n), dtype=np.float32), dtype)
        out = np.empty((n, n), dtype=np.float32)
        np.matmul(a, b, out=out)  # warm-up: BLAS thread pool and page faults

        def batch(iters: int) -> float:
            start = time.perf_counter()
            for _ in range(iters):
                np.matmul(a, b, out=out)
            return time.perf_counter() - start

        return repeat_until(batch, min_time_s)

    def device_copy(self, nbytes: int, min_time_s: float) -> CopyTiming:
        source = np.random.default_rng(2).integers(0, 256, nbytes, dtype=np.uint8)
        target = np.empty_like(source)
        np.copyto(target, source)

        def batch(iters: int) -> float:
            start = time.perf_counter()
            for _ in range(iters):
                np.copyto(target, source)
            return time.perf_counter() - start

        seconds = repeat_until(batch, min_time_s)
        return CopyTiming(seconds, nbytes, bool(np.array_equal(target, source)))

    def host_copies(self, nbytes: int, min_time_s: float) -> tuple[CopyTiming, CopyTiming]:
        # On a CPU "host" and "device" memory are the same RAM: both directions are plain copies.
        return self.device_copy(nbytes, min_time_s / 2), self.device_copy(nbytes, min_time_s / 2)


class TorchCudaBackend:
    """GPU 0 through PyTorch: CUDA-event timing around warmed-up batches, synchronised before reading."""

    device = "cuda"
    WARMUP_ITERS = 3

    def __init__(self) -> None:
        import torch  # lazy: the CPU variant and the bench service never need it

        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} is installed but CUDA is not available")
        self.torch = torch
        self.cuda = torch.device("cuda:0")
        torch.cuda.set_device(self.cuda)
        self.host_memory = "pinned"

    def _dtype(self, dtype: str) -> Any:
        return {"bf16": self.torch.bfloat16, "fp16": self.torch.float16}[dtype]

    def gpu_name(self) -> str | None:
        return str(self.torch.cuda.get_device_name(self.cuda))

    def gpu_count(self) -> int:
        return int(self.torch.cuda.device_count())

    def facts(self) -> dict[str, str]:
        torch = self.torch
        props = torch.cuda.get_device_properties(self.cuda)
        facts = {
            "torch": str(torch.__version__),
            "cuda": str(torch.version.cuda),
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": f"{props.total_memory / (1 << 30):.1f}",
            "multiprocessors": str(props.multi_processor_count),
            "host_memory": self.host_memory,
        }
        facts.update(nvidia_smi_facts())
        return facts

    def _timed(self, step: Callable[[], object], min_time_s: float) -> float:
        torch = self.torch
        for _ in range(self.WARMUP_ITERS):
            step()
        torch.cuda.synchronize()

        def batch(iters: int) -> float:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                step()
            end.record()
            end.synchronize()  # elapsed_time is only valid once the end event has completed
            return float(start.elapsed_time(end)) / 1000.0

        return repeat_until(batch, min_time_s)

    def matmul(self, dtype: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        torch = self.torch
        left = torch.from_numpy(a).to(self.cuda).to(self._dtype(dtype))
        right = torch.from_numpy(b).to(self.cuda).to(self._dtype(dtype))
        product = torch.matmul(left, right)
        torch.cuda.synchronize()
        return product.float().cpu().numpy().astype(np.float64)

    def seconds_per_matmul(self, dtype: str, n: int, min_time_s: float) -> float:
        try:
            return self._time_matmul(dtype, n, min_time_s)
        finally:
            self.torch.cuda.empty_cache()  # the buffers died with _time_matmul's frame: give the memory back

    def _time_matmul(self, dtype: str, n: int, min_time_s: float) -> float:
        torch = self.torch
        a = torch.randn(n, n, device=self.cuda, dtype=self._dtype(dtype))
        b = torch.randn(n, n, device=self.cuda, dtype=self._dtype(dtype))
        out = torch.empty(n, n, device=self.cuda, dtype=self._dtype(dtype))
        return self._timed(lambda: torch.matmul(a, b, out=out), min_time_s)

    def _fit_in_free_memory(self, nbytes: int, buffers: int) -> int:
        free_bytes, _ = self.torch.cuda.mem_get_info(self.cuda)
        return max(1 << 20, min(nbytes, free_bytes // (buffers * 2)))

    def device_copy(self, nbytes: int, min_time_s: float) -> CopyTiming:
        try:
            return self._time_device_copy(nbytes, min_time_s)
        finally:
            self.torch.cuda.empty_cache()

    def _time_device_copy(self, nbytes: int, min_time_s: float) -> CopyTiming:
        torch = self.torch
        nbytes = self._fit_in_free_memory(nbytes, 2)
        source = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=self.cuda)
        target = torch.empty_like(source)
        seconds = self._timed(lambda: target.copy_(source), min_time_s)
        return CopyTiming(seconds, nbytes, bool(torch.equal(source, target)))

    def host_copies(self, nbytes: int, min_time_s: float) -> tuple[CopyTiming, CopyTiming]:
        try:
            return self._time_host_copies(nbytes, min_time_s)
        finally:
            self.torch.cuda.empty_cache()

    def _time_host_copies(self, nbytes: int, min_time_s: float) -> tuple[CopyTiming, CopyTiming]:
        torch = self.torch
        nbytes = self._fit_in_free_memory(nbytes, 1)
        pattern = np.random.default_rng(3).integers(0, 256, nbytes, dtype=np.uint8)
        try:
            host = torch.from_numpy(pattern).pin_memory()
            back = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        except RuntimeError:  # some containers cannot pin this much; pageable copies are slower but honest
            host = torch.from_numpy(pattern.copy())
            back = torch.empty(nbytes, dtype=torch.uint8)
            self.host_memory = "pageable"
        device_buffer = torch.empty(nbytes, dtype=torch.uint8, device=self.cuda)
        to_device_s = self._timed(lambda: device_buffer.copy_(host, non_blocking=True), min_time_s / 2)
        to_host_s = self._timed(lambda: back.copy_(device_buffer, non_blocking=True), min_time_s / 2)
        torch.cuda.synchronize()
        intact = bool(np.array_equal(back.numpy(), pattern))
        return CopyTiming(to_device_s, nbytes, intact), CopyTiming(to_host_s, nbytes, intact)


def nvidia_smi_facts() -> dict[str, str]:
    """Power limit, clocks, PCIe link and temperature: the usual reasons one 'RTX 4090' is slower than another."""
    if shutil.which("nvidia-smi") is None:
        return {}
    fields = [
        "driver_version",
        "power.limit",
        "clocks.max.sm",
        "pcie.link.gen.current",
        "pcie.link.width.current",
        "temperature.gpu",
    ]
    try:
        completed = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "--id=0"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [value.strip() for value in completed.stdout.strip().split(",")]
    return {f"smi_{name.replace('.', '_')}": value for name, value in zip(fields, values, strict=False)}


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


if __name__ == "__main__":
    sys.exit(main())
