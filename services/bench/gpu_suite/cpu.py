"""The CPU backend: numpy, float32 BLAS on inputs rounded to bf16/fp16."""

from __future__ import annotations

import os
import platform
import time

from services.bench.gpu_suite.backend import CopyTiming, np, repeat_until, round_to_dtype


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
