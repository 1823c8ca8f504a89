"""The GPU suite's report as it arrives over HTTP: validated here, at the edge, before anything judges it."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from shared.contract.base import UtcDatetime


def _finite_non_negative(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a measurement must be a finite non-negative number, got {value}")
    return value


Measurement = Annotated[float, AfterValidator(_finite_non_negative)]
MetricName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9_]+$")]


class SuiteReport(BaseModel):
    """What `gpu_suite.run_suite` returns (schema `fleetpilot.gpu_suite/1`); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_name: Literal["fleetpilot.gpu_suite/1"] = Field(default="fleetpilot.gpu_suite/1", alias="schema")
    instance_id: int | None = None
    device: Literal["cuda", "cpu"]
    gpu_name: str | None = Field(default=None, max_length=128)
    gpu_count: int = Field(default=0, ge=0, le=64)
    metrics: dict[MetricName, Measurement] = Field(default_factory=dict, max_length=32)
    checks: dict[MetricName, bool] = Field(default_factory=dict, max_length=32)
    errors: list[Annotated[str, Field(max_length=500)]] = Field(default_factory=list, max_length=50)
    facts: dict[MetricName, Annotated[str, Field(max_length=200)]] = Field(default_factory=dict, max_length=32)
    started_at: UtcDatetime
    # the suite runs for minutes; an infinite duration was stored as null and then failed every read of the report
    duration_s: float = Field(ge=0, le=86400, allow_inf_nan=False)

    @property
    def failed_checks(self) -> list[str]:
        return sorted(name for name, passed in self.checks.items() if not passed)
