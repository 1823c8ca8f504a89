"""The CUDA backend: GPU 0 through PyTorch (imported lazily), and nvidia-smi's facts about the card."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from services.bench.gpu_suite.backend import CopyTiming, np, repeat_until


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
