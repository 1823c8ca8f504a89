"""The GPU benchmark suite a rented machine runs at start: matmul TFLOP/s, memory and host-link bandwidth.

Self-contained on purpose (stdlib + numpy, torch imported lazily): the bench service joins this package's modules
into one script (services/bench/suite_script.py) and serves it at GET /bench/suite.py, vast's `onstart` fetches
and runs it in the background, and it reports back over HTTP:
it prints its report as one JSON line on stdout and, given --report-url, POSTs the same JSON there with
`Authorization: Bearer $FLEETPILOT_BENCH_TOKEN`, retrying with backoff. It never talks to NATS: a rented
third-party machine gets no bus credentials, only a token that can do nothing but file a report. The
instance id comes from --instance-id or vast's `CONTAINER_ID` / `VAST_CONTAINERLABEL` ("C.<id>").

With PyTorch on CUDA it measures GPU 0 with CUDA events after warm-up; without a GPU (or with --device cpu)
the same driver runs a numpy variant labelled "cpu", whose bf16/fp16 figures are float32 BLAS on inputs
rounded to bf16/fp16 (numpy has no bf16 and its fp16 matmul bypasses BLAS). Every measurement is checked:
matmuls against a float64 reference, copies byte for byte; a wrong result is a failed check, not a number.

    python fleetpilot_gpu_suite.py --device cuda --report-url https://bench.example/bench/report
    python -m services.bench.gpu_suite --device cpu
"""

from __future__ import annotations

from services.bench.gpu_suite.backend import CopyTiming, SuiteSizes, round_to_bf16
from services.bench.gpu_suite.cli import instance_id_from_environment
from services.bench.gpu_suite.cpu import NumpyCpuBackend
from services.bench.gpu_suite.driver import (
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    MATMUL_BF16,
    MATMUL_FP16,
    MEMORY_COPY,
    SCHEMA,
    TASK,
    run_suite,
    select_backend,
    unusable_report,
)

__all__ = [
    "DEVICE_TO_HOST",
    "HOST_TO_DEVICE",
    "MATMUL_BF16",
    "MATMUL_FP16",
    "MEMORY_COPY",
    "SCHEMA",
    "TASK",
    "CopyTiming",
    "NumpyCpuBackend",
    "SuiteSizes",
    "instance_id_from_environment",
    "round_to_bf16",
    "run_suite",
    "select_backend",
    "unusable_report",
]
