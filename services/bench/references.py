"""What each GPU model should reach in the suite, with where every number comes from.

Spec values are vendor peaks: dense (no sparsity) tensor TFLOP/s with FP32 accumulate (what a PyTorch
matmul does; GeForce cards run FP32 accumulate at half their FP16-accumulate rate, professional and data
centre cards at full rate), peak DRAM bandwidth, and the PCIe link's per-direction peak. No machine reaches
a peak, so a spec reference expects `ACHIEVABLE_SHARE_OF_SPEC` of it. A measured reference (our own suite on
a known-good machine, with date and method) replaces the spec-derived expectation for its model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from services.bench.gpu_suite import DEVICE_TO_HOST, HOST_TO_DEVICE, MATMUL_BF16, MATMUL_FP16, MEMORY_COPY, TASK

RECORDED = "2026-12-02"  # when the spec values below were entered

SPEC_METHOD = (
    "vendor peak: dense tensor TFLOP/s with FP32 accumulate; peak DRAM GB/s; PCIe per-direction peak GB/s "
    "(gen4 x16 = 31.5, gen5 x16 = 63.0)"
)

# Shares of a spec peak this suite can be expected to reach on a healthy machine. Estimates, not our
# measurements: public cuBLAS runs of large square bf16 matmuls land at 70-95% of the dense peak (H100 SXM
# near the low end, held back by its power cap), device copies and pinned PCIe copies at 75-90%. The
# lowest end of each range is taken, so a healthy card sits at a ratio near or above 1 and the 80%
# "degraded" line falls at about 60% of the peak. Replace with a measured reference when one exists.
ACHIEVABLE_SHARE_OF_SPEC = {
    MATMUL_BF16: 0.75,
    MATMUL_FP16: 0.75,
    MEMORY_COPY: 0.75,
    HOST_TO_DEVICE: 0.75,
    DEVICE_TO_HOST: 0.75,
}

PCIE4_X16_GB_PER_S = 31.5
PCIE5_X16_GB_PER_S = 63.0


@dataclass(frozen=True)
class Source:
    kind: Literal["spec", "measured"]
    document: str
    published: str
    method: str
    recorded: str = RECORDED


@dataclass(frozen=True)
class GpuReference:
    model: str
    matmul_bf16_tflops: float
    matmul_fp16_tflops: float
    memory_gb_per_s: float
    host_link_gb_per_s: float
    source: Source
    task_s: float | None = None  # one real task end to end, once measured on a known-good machine

    def expected_metrics(self) -> dict[str, float]:
        """The values a healthy machine of this model should report, per suite metric."""
        values = {
            MATMUL_BF16: self.matmul_bf16_tflops,
            MATMUL_FP16: self.matmul_fp16_tflops,
            MEMORY_COPY: self.memory_gb_per_s,
            HOST_TO_DEVICE: self.host_link_gb_per_s,
            DEVICE_TO_HOST: self.host_link_gb_per_s,
        }
        if self.source.kind == "spec":
            values = {name: value * ACHIEVABLE_SHARE_OF_SPEC[name] for name, value in values.items()}
        if self.task_s is not None:
            values[TASK] = self.task_s
        return values


def _spec(document: str, published: str, note: str = "") -> Source:
    return Source("spec", document, published, SPEC_METHOD + (f"; {note}" if note else ""))


SPEC_REFERENCES: tuple[GpuReference, ...] = (
    GpuReference(
        "RTX 3090",
        71.0,
        71.0,
        936.0,
        PCIE4_X16_GB_PER_S,
        _spec("NVIDIA Ampere GA102 GPU Architecture whitepaper, appendix A (GeForce RTX 3090)", "2020-09"),
    ),
    GpuReference(
        "RTX 4090",
        165.2,
        165.2,
        1008.0,
        PCIE4_X16_GB_PER_S,
        _spec("NVIDIA Ada GPU Architecture whitepaper, appendix A (GeForce RTX 4090)", "2022-10"),
    ),
    GpuReference(
        "RTX 5090",
        209.5,
        209.5,
        1792.0,
        PCIE5_X16_GB_PER_S,
        _spec(
            "NVIDIA RTX Blackwell GPU Architecture whitepaper (GeForce RTX 5090)",
            "2025-01",
            "419 TFLOPS dense FP16 with FP16 accumulate, halved for FP32 accumulate on GeForce",
        ),
    ),
    GpuReference(
        "RTX PRO 6000",
        500.0,
        500.0,
        1792.0,
        PCIE5_X16_GB_PER_S,
        _spec(
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet (600 W)",
            "2025-03",
            "derived: 4000 AI TOPS (FP4, sparse) / 8 = FP16 dense, full-rate FP32 accumulate assumed as on "
            "RTX 6000 Ada; unverified until measured",
        ),
    ),
    GpuReference(
        "RTX PRO 6000 Max-Q",
        438.9,
        438.9,
        1792.0,
        PCIE5_X16_GB_PER_S,
        _spec(
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition datasheet (300 W)",
            "2025-03",
            "derived: 3511 AI TOPS (FP4, sparse) / 8; unverified until measured",
        ),
    ),
    GpuReference(
        "A100 SXM4",
        312.0,
        312.0,
        2039.0,
        PCIE4_X16_GB_PER_S,
        _spec("NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM)", "2021-06"),
    ),
    GpuReference(
        "A100 PCIE",
        312.0,
        312.0,
        1935.0,
        PCIE4_X16_GB_PER_S,
        _spec("NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe)", "2021-06"),
    ),
    GpuReference(
        "H100 SXM",
        989.5,
        989.5,
        3350.0,
        PCIE5_X16_GB_PER_S,
        _spec("NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 1979 TFLOPS sparse)", "2023-01"),
    ),
    GpuReference(
        "H100 PCIE",
        756.5,
        756.5,
        2000.0,
        PCIE5_X16_GB_PER_S,
        _spec("NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: 1513 TFLOPS sparse)", "2023-01"),
    ),
    GpuReference(
        "H100 NVL",
        835.5,
        835.5,
        3900.0,
        PCIE5_X16_GB_PER_S,
        _spec("NVIDIA H100 Tensor Core GPU datasheet (H100 NVL: 1671 TFLOPS sparse)", "2023-03"),
    ),
    GpuReference(
        "H200",
        989.5,
        989.5,
        4800.0,
        PCIE5_X16_GB_PER_S,
        _spec("NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: 1979 TFLOPS sparse)", "2024-11"),
    ),
    GpuReference(
        "H200 NVL",
        835.5,
        835.5,
        4800.0,
        PCIE5_X16_GB_PER_S,
        _spec("NVIDIA H200 Tensor Core GPU datasheet (H200 NVL: 1671 TFLOPS sparse)", "2024-11"),
    ),
)

# Our own suite on known-good machines (kind="measured"); each replaces its model's spec reference.
# None yet: the H200 entry is to be recorded from the first run on a lent H200.
MEASURED_REFERENCES: tuple[GpuReference, ...] = ()

# Name tokens that identify a model, most specific first: torch reports "NVIDIA H100 80GB HBM3" or
# "NVIDIA GeForce RTX 4090", vast.ai lists "H100 SXM", "RTX 4090". Models are named as vast.ai spells
# `gpu_name` (as in shared/gpu_models.py), so a result's gpu_model matches the offer's. The 40GB A100s
# (1555 GB/s) share the 80GB references: they read about 0.85 on memory, still a pass.
MODEL_RULES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"h200", "nvl"}), "H200 NVL"),
    (frozenset({"h200"}), "H200"),
    (frozenset({"h100", "nvl"}), "H100 NVL"),
    (frozenset({"h100", "pcie"}), "H100 PCIE"),
    (frozenset({"h100"}), "H100 SXM"),
    (frozenset({"a100", "pcie"}), "A100 PCIE"),
    (frozenset({"a100"}), "A100 SXM4"),
    (frozenset({"pro", "6000", "max", "q"}), "RTX PRO 6000 Max-Q"),
    (frozenset({"pro", "6000"}), "RTX PRO 6000"),
    (frozenset({"5090"}), "RTX 5090"),
    (frozenset({"4090"}), "RTX 4090"),
    (frozenset({"3090"}), "RTX 3090"),
)


def name_tokens(gpu_name: str) -> frozenset[str]:
    words = re.split(r"[\s\-_/,()]+", gpu_name.lower())
    return frozenset(word for word in words if word and word not in {"nvidia", "geforce"})


def canonical_gpu_model(gpu_name: str | None) -> str | None:
    """The reference model a device or offer name denotes, or None when no reference covers it."""
    if not gpu_name:
        return None
    tokens = name_tokens(gpu_name)
    for required, model in MODEL_RULES:
        if required <= tokens:
            return model
    return None


def reference_for(
    gpu_name: str | None,
    measured: tuple[GpuReference, ...] = MEASURED_REFERENCES,
    specs: tuple[GpuReference, ...] = SPEC_REFERENCES,
) -> GpuReference | None:
    """The measured reference for this GPU's model if one exists, else its spec reference, else None."""
    model = canonical_gpu_model(gpu_name)
    if model is None:
        return None
    for reference in (*measured, *specs):
        if reference.model == model:
            return reference
    return None
