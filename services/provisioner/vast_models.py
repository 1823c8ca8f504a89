"""What vast.ai returns, as the provisioner reads it: offers and instances (unknown fields ignored)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class VastOffer(BaseModel):
    """An offer from `POST /api/v0/bundles/`; vast sends many more fields, which are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: int
    machine_id: int | None = None
    host_id: int | None = None
    gpu_name: str
    num_gpus: int = Field(default=1, ge=1)
    dph_total: float = Field(ge=0)
    reliability: float | None = None
    reliability2: float | None = None
    verified: bool | None = None
    cuda_max_good: float | None = None
    disk_space: float | None = None
    geolocation: str | None = None

    @property
    def reliability_score(self) -> float:
        value = self.reliability2 if self.reliability2 is not None else self.reliability
        return min(max(value if value is not None else 0.0, 0.0), 1.0)


class VastInstance(BaseModel):
    """An instance from the list and show endpoints."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: int
    actual_status: str | None = None
    intended_status: str | None = None
    cur_state: str | None = None
    status_msg: str | None = None
    label: str | None = None
    dph_total: float = 0.0
    machine_id: int | None = None
    host_id: int | None = None
    gpu_name: str | None = None
    num_gpus: int | None = None
    start_date: float | None = None
