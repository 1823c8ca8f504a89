"""What every backend shares: the suite's sizes, the `Backend` protocol, a copy's timing, inputs rounded as a
bf16/fp16 cast rounds them, and the timing loop that runs until a measurement is sustained."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

try:
    import numpy as np
except ImportError:  # the bench service imports this package for its names and serves it as text; only running
    np = None  # type: ignore[assignment]  # the suite needs numpy, which the machines it runs on have


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
