"""What vast.ai returns, as the provisioner reads it: offers and instances.

Read tolerantly: fields FleetPilot does not use are kept as they came (`model_extra`), and every field vast
has been seen to send as null is optional. A row that still cannot be read is skipped by the client, which
logs and counts it; one odd row never blinds the whole listing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from shared.gpu_models import MOST_GPUS


def _number_or_none(value: Any) -> float | None:
    """A field read for information only: a number (or a numeric string) is kept, anything else reads as absent."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _flag_or_none(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    return None


HOURS_PER_MONTH = 730.0  # vast prices storage per GB per month; its billing pages use 730 h a month
MEGABITS_PER_GB = 8000.0  # vast's `inet_down` is in Mb/s, images in GB
SLOWEST_LINK_MBPS = 1.0  # a listed link of 0 Mb/s would make a pull infinite; vast lists none that slow


def storage_usd_per_h(storage_usd_per_gb_month: float, disk_gb: float) -> float:
    """What an instance's disk costs an hour (vast quotes $/GB/month), in every state but gone (and offline)."""
    return storage_usd_per_gb_month * disk_gb / HOURS_PER_MONTH


def pull_s(gb: float, inet_down_mbps: float) -> float:
    """Seconds to download `gb` at a machine's listed `inet_down` (the best a pull can do)."""
    if gb <= 0:
        return 0.0
    return gb * MEGABITS_PER_GB / max(inet_down_mbps, SLOWEST_LINK_MBPS)


# fields added for bids, bandwidth and startup: an odd value there reads as unknown, never makes a row unreadable
LenientFloat = Annotated[float | None, BeforeValidator(_number_or_none)]
LenientFlag = Annotated[bool | None, BeforeValidator(_flag_or_none)]

# the latest moment an instance's `start_date` can mean (2100-01-01): past it, or at 0 or below, it means nothing
LATEST_START_S = 4_102_444_800.0


def _price_or_none(value: Any) -> float | None:
    """A price an instance is billed at: a finite number of dollars above zero; anything else is unknown (the
    budget then counts the most it would pay, or what it knew). A negative price read as such made room in the
    budget, and so did $0: no rented GPU is free, so a zero is vast not saying (as offers read it, `dph_total`)."""
    number = _number_or_none(value)
    return number if number is not None and number > 0 else None


def _moment_or_none(value: Any) -> float | None:
    number = _number_or_none(value)
    return number if number is not None and 0 < number < LATEST_START_S else None


def _gpus_or_none(value: Any) -> int | None:
    number = _number_or_none(value)
    return int(number) if number is not None and number == int(number) and 1 <= number <= MOST_GPUS else None


# what vast says of an instance we pay for: read strictly for sense, an odd value reads as unknown, never as a
# number that moves the budget or the row's readability (one odd row adopted failed the whole reconciliation)
InstancePrice = Annotated[float | None, BeforeValidator(_price_or_none)]
InstanceMoment = Annotated[float | None, BeforeValidator(_moment_or_none)]
InstanceGpus = Annotated[int | None, BeforeValidator(_gpus_or_none)]


class VastOffer(BaseModel):
    """An offer from `POST /api/v0/bundles/`; the fields ranking reads are typed, the rest kept as extras."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: int
    machine_id: int | None = None
    host_id: int | None = None
    gpu_name: str
    # a count past any machine's ranked a host's offer as nearly free per task: such a row is unreadable (skipped)
    num_gpus: int = Field(default=1, ge=1, le=MOST_GPUS)
    # an offer without a price cannot be ranked or budgeted, and one at $0 would rank first whatever it is: a null
    # or a price of zero or less makes the row unreadable (skipped)
    dph_total: float = Field(gt=0)
    reliability: float | None = None
    reliability2: float | None = None
    verified: bool | None = None
    external: bool | None = None
    cuda_max_good: float | None = None
    disk_space: float | None = None
    geolocation: str | None = None
    min_bid: LenientFloat = None  # $/h: the lowest interruptible bid the machine takes
    is_bid: LenientFlag = None  # priced for a `type: bid` search
    inet_down: LenientFloat = None  # Mb/s: how fast the image pulls
    inet_up: LenientFloat = None
    inet_down_cost: LenientFloat = None  # $/GB downloaded
    inet_up_cost: LenientFloat = None
    disk_bw: LenientFloat = None  # MB/s
    storage_cost: LenientFloat = None  # $/GB/month

    @property
    def reliability_score(self) -> float:
        value = self.reliability2 if self.reliability2 is not None else self.reliability
        return min(max(value if value is not None else 0.0, 0.0), 1.0)


class VastInstance(BaseModel):
    """An instance from the list and show endpoints. vast sends nulls for a contract still being set up
    (`actual_status`, `dph_total`, `start_date`, ...), so only the id is required."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: int
    actual_status: str | None = None
    intended_status: str | None = None
    cur_state: str | None = None
    status_msg: str | None = None
    label: str | None = None
    dph_total: InstancePrice = None
    dph_base: InstancePrice = None
    machine_id: int | None = None
    host_id: int | None = None
    gpu_name: str | None = None
    num_gpus: InstanceGpus = None
    start_date: InstanceMoment = None
    next_state: str | None = None
    is_bid: LenientFlag = None  # interruptible: paused when outbid, resumed when its bid is the highest again
    min_bid: LenientFloat = None
    inet_down: LenientFloat = None
    inet_down_cost: LenientFloat = None
    storage_cost: LenientFloat = None  # $/GB/month, as offers give it
    disk_space: LenientFloat = None  # GB allocated

    @property
    def price_usd_per_h(self) -> float | None:
        """What it costs now: `dph_total`, else `dph_base` (GPU without storage); None when vast says neither."""
        return self.dph_total if self.dph_total is not None else self.dph_base

    @property
    def storage_usd_per_h(self) -> float | None:
        """What its disk costs while it is stopped: `storage_cost` × `disk_space` (vast quotes $/GB/month), else
        `dph_total` − `dph_base` (the total is GPU plus storage); None when neither can be read."""
        if self.storage_cost is not None and self.disk_space is not None:
            return max(0.0, storage_usd_per_h(self.storage_cost, self.disk_space))
        if self.dph_total is not None and self.dph_base is not None and self.dph_total >= self.dph_base:
            return self.dph_total - self.dph_base
        return None


@dataclass(frozen=True)
class InstanceListing:
    """A successful instance list: the rows read, and the ids of rows listed but unreadable (they exist, so
    reconciliation must not take them for gone)."""

    instances: list[VastInstance] = field(default_factory=list)
    unreadable_ids: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ChargeListing:
    """A successful charges query: the rows read, and how many rows it held that could not be read (their amounts
    are unknown, so the rows' total is partial)."""

    charges: list[VastCharge] = field(default_factory=list)
    unreadable_rows: int = 0


class VastCharge(BaseModel):
    """A row of `GET /api/v0/invoices?type=charge`: vast writes numbers as strings ("10.000"), both are read.

    Read strictly: a charge is money, so a row whose amount or moment is no finite number in range is unreadable
    (the client skips and counts it, and the total is then partial), never $0 nor a crash. One row stamped in
    milliseconds, or NaN, failed the whole `fleetpilot cost`; an amount of "inf" was published as null."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    description: str = ""
    timestamp: float = Field(gt=0, lt=LATEST_START_S)  # epoch seconds: milliseconds are past 2100
    quantity: float = 0.0
    amount: float
    instance_id: int | None = None

    @property
    def kind(self) -> str:
        """gpu, storage or bandwidth, from vast's description ("Instance 123 GPU charge: hours * $/hr")."""
        text = self.description.lower()
        if "gpu" in text:
            return "gpu"
        if "storage" in text or "disk" in text:
            return "storage"
        if "bandwidth" in text or "download" in text or "upload" in text or "inet" in text:
            return "bandwidth"
        return "other"
