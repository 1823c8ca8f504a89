"""What the provisioner saw on the vast.ai account at its last good list, beyond FleetPilot's own instances."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.contract.base import ContractModel, Event

FOREIGN_INSTANCES_KEPT = 200  # an account with more foreign rows than this still says how many there are


class ForeignInstance(ContractModel):
    """An instance on the account that is not this deployment's: someone's own machine (no FleetPilot label) or
    another FleetPilot deployment's; shown and never touched."""

    instance_id: int
    label: str | None = Field(default=None, max_length=256)
    deployment_id: str | None = Field(
        default=None, max_length=64, description="the other FleetPilot deployment's id; null: no FleetPilot label"
    )
    gpu_model: str | None = Field(default=None, max_length=128)
    num_gpus: int | None = None
    vast_actual_status: str | None = Field(default=None, max_length=64)
    price_usd_per_h: float | None = Field(default=None, description="null when vast sent no price")


class VastAccountObserved(Event):
    """Published after every successful instance list (the last one is kept), for `fleetpilot status`."""

    foreign_count: int = Field(ge=0)
    foreign_instances: list[ForeignInstance] = Field(default_factory=list, max_length=FOREIGN_INSTANCES_KEPT)
    unreadable_rows: int = Field(default=0, ge=0, description="rows listed but unreadable at that list")
    # also published when vast.ai refuses the key: the foreign rows are then those of the last good list
    api_key: Literal["accepted", "refused"] = Field(default="accepted", description="vast.ai's answer to the key")
    api_key_detail: str = Field(default="", max_length=500, description="what vast.ai said when it refused it")
