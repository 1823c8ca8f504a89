"""Benchmark requests and verdicts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.contract.base import Event

BenchKind = Literal["gpu", "serving"]
# "unknown": no report came (onstart failed, the intake was unreachable): nothing was judged, so nothing may be
# failed or destroyed for it; bench keeps waiting and counts it for an alert
BenchVerdict = Literal["pass", "degraded", "fail", "unknown"]


class BenchRequest(Event):
    instance_id: int | None = None
    kind: BenchKind
    url: str | None = Field(default=None, max_length=2000, description="the endpoint, for a serving benchmark")
    reason: str = Field(default="", max_length=500)
    # a GPU bench of a rented instance is judged only on the report its own token proves, against vast's listing
    label: str | None = Field(default=None, max_length=256, description="the instance's label (ours, from vast)")
    gpu_model: str | None = Field(default=None, max_length=64, description="the GPU vast lists for the instance")
    num_gpus: int | None = Field(
        default=None, ge=1, le=64, description="how many GPUs vast lists for the instance: a report showing fewer fails"
    )


class BenchResult(Event):
    """A measured result and its verdict against the GPU model's reference."""

    instance_id: int | None = None
    kind: BenchKind
    device: Literal["cuda", "cpu", "http"]
    gpu_model: str | None = None
    verdict: BenchVerdict
    metrics: dict[str, float] = Field(default_factory=dict)
    ratios_to_reference: dict[str, float] = Field(default_factory=dict)
    error: str | None = Field(default=None, max_length=2000)
    explanation: str = Field(default="", max_length=1000)
