"""The GPU models FleetPilot knows: the workload's reference throughput and a typical vast.ai price for each.

The provisioner ranks offers with it, the vast.ai simulator builds its market from it, and the world simulator
derives task completion rates from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

# The workload: a proving task takes ~4 min of one machine, and a pipelined RTX 4090-class machine finishes
# one every ~30 s, i.e. ~120 tasks/h. That is the anchor; every other model is scaled from it by a rough
# blend of integer/FP32 throughput and memory bandwidth relative to the RTX 4090 (the proving kernels, MSM
# and NTT, are bound by both), rounded: these are priors until bench results and observed completions
# replace them.
REFERENCE_TASKS_PER_H_RTX_4090 = 120.0
# more GPUs than any vast machine has: a count past it is no count
MOST_GPUS = 64


@dataclass(frozen=True)
class GpuModel:
    name: str  # as vast.ai spells `gpu_name`
    reference_tasks_per_h: float  # one GPU of this model on the workload, pipelined
    typical_price_usd_per_h: float  # a typical on-demand vast.ai price for one GPU
    gpu_ram_gb: int
    compute_cap: int  # CUDA compute capability ×100, as vast.ai reports it
    cuda_max_good: float  # a typical newest CUDA version hosts of this model offer


def _model(name: str, ratio_to_4090: float, price: float, ram_gb: int, cc: int, cuda: float) -> GpuModel:
    return GpuModel(name, round(REFERENCE_TASKS_PER_H_RTX_4090 * ratio_to_4090, 1), price, ram_gb, cc, cuda)


CATALOG: dict[str, GpuModel] = {
    model.name: model
    for model in (
        _model("RTX 3090", 0.55, 0.20, 24, 860, 12.4),  # Ampere consumer: ~half a 4090 on integer work
        _model("RTX 4090", 1.00, 0.50, 24, 890, 12.4),  # the anchor (DESIGN: $0.50-0.54/h)
        _model("RTX 5090", 1.35, 0.43, 32, 1200, 12.8),  # Blackwell: more SMs, GDDR7 (DESIGN: $0.43/h seen)
        _model("RTX PRO 6000", 1.45, 0.85, 96, 1200, 12.8),  # the 5090 die, fuller, more memory
        _model("A100 PCIE", 0.80, 0.70, 40, 800, 12.2),  # high bandwidth, weak integer throughput
        _model("A100 SXM4", 0.85, 0.80, 80, 800, 12.4),
        _model("H100 PCIE", 1.25, 1.60, 80, 900, 12.4),
        _model("H100 SXM", 1.50, 1.90, 80, 900, 12.6),
        _model("H200", 1.60, 2.50, 141, 900, 12.6),  # H100 compute, more and faster memory
    )
}


# the world simulator's week asks this ~7 M times of a few dozen names (every offer ranked at every launch)
@lru_cache(maxsize=1024)
def normalised(name: str) -> str:
    """A GPU name as every part of FleetPilot compares it: case, underscores and repeated spaces ignored."""
    # the vast CLI writes spaces as underscores in queries ("RTX_4090"); accept either spelling
    return " ".join(name.replace("_", " ").split()).upper()


_BY_NORMALISED = {normalised(name): model for name, model in CATALOG.items()}


def find(name: str | None) -> GpuModel | None:
    """The catalog entry for a vast.ai `gpu_name` (case and underscores ignored), or None if unknown."""
    if not name:
        return None
    return _BY_NORMALISED.get(normalised(name))


def reference_tasks_per_h(name: str | None) -> float | None:
    model = find(name)
    return model.reference_tasks_per_h if model else None
