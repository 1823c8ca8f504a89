"""What a simulated vast.ai world is made of: the market, how machines start and fail, how the API misbehaves.

A `Scenario` is plain data (pydantic), loadable from YAML or JSON, with a seed: the same scenario, seed and
sequence of requests give the same world. The vast.ai simulator (`sim.vast.server`) serves it over HTTP; the
world simulator imports this same model to drive task completions on the machines it rents.

Units are in the names: `_s` seconds of simulated time (the injected clock), `_wall_s` seconds of wall time
(only response latency, which exercises the client's own wall-clock timeouts), `_usd_per_h` dollars per hour.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared import gpu_models


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FloatRange(_Strict):
    """A closed interval; values are drawn uniformly from it."""

    min: float
    max: float

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if self.min > self.max:
            raise ValueError(f"range min {self.min} is above max {self.max}")
        return self


class Endpoint(StrEnum):
    """The vast.ai API endpoints the simulator serves; rate limits, faults and the request log use these names."""

    SEARCH = "search"  # POST /api/v0/bundles/
    CREATE = "create"  # PUT /api/v0/asks/{id}/
    LIST_V1 = "list_v1"  # GET /api/v1/instances/
    LIST_V0 = "list_v0"  # GET /api/v0/instances/ (deprecated: 410 unless switched on)
    SHOW = "show"  # GET /api/v0/instances/{id}/
    MANAGE = "manage"  # PUT /api/v0/instances/{id}/ (start, stop, label)
    DESTROY = "destroy"  # DELETE /api/v0/instances/{id}/
    BID_PRICE = "bid_price"  # PUT /api/v0/instances/bid_price/{id}/ (change an interruptible instance's bid)
    INVOICES = "invoices"  # GET /api/v0/invoices (type=charge: what the account was charged, per instance and day)


class Fate(StrEnum):
    """What happens to a rented machine, decided when it is created."""

    HEALTHY = "healthy"  # loading for the startup time, then running
    STUCK_LOADING = "stuck_loading"  # stays in `loading` forever
    EXIT_ERROR = "exit_error"  # reaches the end of loading, then `exited` with a docker error in status_msg
    OFFLINE_LATER = "offline_later"  # runs, then the host disconnects: `offline`
    SLOW = "slow"  # runs, but computes slower than its GPU model's reference


class MarketSegment(_Strict):
    """`count` generated offers of one GPU model; each machine is its own offer with a stable id."""

    gpu_model: str
    count: int = Field(ge=0, le=10_000)
    num_gpus: int = Field(default=1, ge=1, le=16)
    price_usd_per_h: FloatRange | None = Field(
        default=None, description="whole-machine GPU price; default: the catalog's typical price per GPU ±15%"
    )
    reliability: FloatRange = FloatRange(min=0.90, max=0.995)
    verified_share: float = Field(default=0.9, ge=0, le=1)
    cuda_max_good: float | None = Field(default=None, description="default: the catalog's typical value")
    disk_space_gb: FloatRange = FloatRange(min=100, max=1000)
    machines_per_host: int = Field(default=1, ge=1, description="machines of one host share its host_id")
    inet_down_mbps: FloatRange = Field(
        default=FloatRange(min=200, max=2000), description="each machine's download link (vast's `inet_down`, Mb/s)"
    )
    inet_down_cost_usd_per_gb: FloatRange = Field(
        default=FloatRange(min=0.001, max=0.02), description="each machine's download price (`inet_down_cost`)"
    )
    geolocations: list[str] = Field(default_factory=lambda: ["Texas, US", "Quebec, CA", "Bavaria, DE", "Tokyo, JP"])

    @model_validator(mode="after")
    def _known_model(self) -> MarketSegment:
        if gpu_models.find(self.gpu_model) is None and (self.price_usd_per_h is None or self.cuda_max_good is None):
            raise ValueError(
                f"gpu_model {self.gpu_model!r} is not in shared.gpu_models; give price_usd_per_h and cuda_max_good"
            )
        return self


class OfferSpec(_Strict):
    """One exact offer, for tests and hand-made scenarios. Ids left out are assigned."""

    offer_id: int | None = Field(default=None, ge=1)
    machine_id: int | None = Field(default=None, ge=1)
    host_id: int | None = Field(default=None, ge=1)
    gpu_model: str
    num_gpus: int = Field(default=1, ge=1, le=16)
    price_usd_per_h: float = Field(gt=0, description="whole-machine GPU price (dph_base)")
    reliability: float = Field(default=0.98, ge=0, le=1)
    verified: bool = True
    cuda_max_good: float = 12.4
    disk_space_gb: float = Field(default=500, gt=0)
    geolocation: str = "Texas, US"
    inet_down_mbps: float = Field(default=900.0, gt=0, description="`inet_down`, Mb/s: how fast an image pulls")
    inet_up_mbps: float = Field(default=800.0, gt=0)
    inet_down_cost_usd_per_gb: float = Field(default=0.005, ge=0, description="`inet_down_cost`: the pull's price")
    inet_up_cost_usd_per_gb: float = Field(default=0.005, ge=0)
    fate: Fate | None = Field(default=None, description="force the fate of every instance on this machine")


class MarketDynamics(_Strict):
    """How the market moves on its own; evaluated in whole ticks so results do not depend on request timing."""

    tick_s: float = Field(default=60.0, gt=0)
    price_drift_per_h: float = Field(
        default=0.02, ge=0, description="relative standard deviation of each offer's price random walk, per hour"
    )
    # the provisioner budgets with a small price margin; a drift bounded per tick keeps a search-to-rent
    # race inside it, as real price changes between two calls seconds apart are small
    max_price_step: float = Field(default=0.01, ge=0, le=0.5, description="largest relative price change per tick")
    taken_by_others_per_h: float = Field(default=0.5, ge=0, description="offers rented by other customers, per hour")
    new_offers_per_h: float = Field(default=0.5, ge=0, description="new machines listed, per hour (from segments)")
    returned_after_destroy: bool = Field(
        default=True, description="a destroyed instance's machine is offered again, under the same offer id"
    )


class StartupSpec(_Strict):
    """Create → running: the image pull over the machine's link, plus the rest (container start, weights, warm-up).

    The pull takes `image_gb` over the offer's `inet_down`; a machine that ran the same image before has its
    layers cached and pulls only `cached_pull_share` of it. `startup_s` is the rest, drawn per instance (default
    1-2 h, the observed range).
    """

    provisioning_s: float = Field(default=20.0, ge=0, description="`actual_status` null, just after create")
    created_s: float = Field(default=40.0, ge=0, description="then `created`, before loading starts")
    startup_s: FloatRange = Field(
        default=FloatRange(min=3600, max=7200),
        description="create → running apart from the image pull, drawn uniformly per instance",
    )
    restart_s: float = Field(default=120.0, ge=0, description="stopped → running again, the image already on disk")
    image_gb: float = Field(
        default=10.0, ge=0, description="what a first start downloads (GB): time from `inet_down`, billed per GB"
    )
    cached_pull_share: float = Field(
        default=0.0, ge=0, le=1, description="share of the image still pulled on a machine that ran it before"
    )


class StopStart(_Strict):
    """Stopping keeps the disk and frees the GPU; starting again needs the GPU back, which another renter may hold.

    Each start of a stopped instance draws whether its GPU was rented meanwhile, with probability
    1 - exp(-`gpu_taken_per_stopped_h` × hours stopped). Then the instance waits in vast's "scheduling" state
    until the GPU is free again, after a time drawn from `gpu_free_after_s`, or forever when that is null.
    """

    # not a vast figure: vast only warns that the GPU "may get reassigned"; a guess a scenario should set
    gpu_taken_per_stopped_h: float = Field(default=0.05, ge=0)
    gpu_free_after_s: FloatRange | None = Field(default=FloatRange(min=1800, max=6 * 3600))


class BidMarket(_Strict):
    """Interruptible instances: a bid at or above the machine's `min_bid` runs while no one outbids it.

    Other renters' bids for each GPU model follow a seeded random walk, as a share of each machine's on-demand
    price; an instance whose bid is below the competing bid is paused (keeps its disk, GPU not billed) and
    resumes when it is the highest again. A share at or above 1 stands for an on-demand renter, who outranks
    every bid.
    """

    # dstack issue #4026 quotes an RTX 4090 at ~0.24 $/h on-demand and ~0.12 $/h min_bid
    min_bid_share: float = Field(default=0.5, gt=0, le=1, description="`min_bid` as a share of the on-demand price")
    # not vast figures (vast publishes no bid history): a start around min_bid, so a bid at min_bid wins for some
    # models and waits for others, and a walk that now and then lets on-demand renters take the machines
    start_share: FloatRange = Field(
        default=FloatRange(min=0.35, max=0.65), description="each GPU model's competing bid at the start"
    )
    share_bounds: FloatRange = Field(default=FloatRange(min=0.25, max=1.1), description="where the walk stays")
    volatility_per_h: float = Field(default=0.1, ge=0, description="standard deviation of the share's walk, per hour")


class FateShares(_Strict):
    """The share of new instances given each bad fate; the rest are healthy."""

    stuck_loading: float = Field(default=0.03, ge=0, le=1)
    exit_error: float = Field(default=0.03, ge=0, le=1)
    offline_later: float = Field(default=0.03, ge=0, le=1)
    slow: float = Field(default=0.10, ge=0, le=1)
    offline_after_s: FloatRange = Field(default=FloatRange(min=2 * 3600, max=24 * 3600), description="after running")
    slow_factor: FloatRange = Field(
        default=FloatRange(min=0.5, max=0.8), description="throughput relative to the GPU model's reference"
    )
    exit_error_messages: list[str] = Field(
        default_factory=lambda: [
            "Error response from daemon: failed to create task for container: failed to create shim task: "
            "OCI runtime create failed: nvidia-container-cli: initialization error: nvml error: driver not loaded",
            "Error: image pull failed: unexpected EOF",
            "Error response from daemon: no space left on device",
        ],
        min_length=1,
    )

    @model_validator(mode="after")
    def _shares_fit(self) -> FateShares:
        total = self.stuck_loading + self.exit_error + self.offline_later + self.slow
        if total > 1.0 + 1e-9:
            raise ValueError(f"fate shares add up to {total:.3f}, above 1")
        # a "slow" machine faster than its model's reference would make the world's lower bound, which prices
        # work at the reference speed, no bound at all
        if not 0 < self.slow_factor.min <= self.slow_factor.max <= 1:
            raise ValueError(
                f"slow_factor must lie within (0, 1] (a share of the model's reference throughput),"
                f" got {self.slow_factor.min:g}..{self.slow_factor.max:g}"
            )
        return self


class RateLimit(_Strict):
    """A minimum interval between accepted requests to one endpoint (per API key). Violations answer 429."""

    min_interval_s: float = Field(ge=0)
    penalty_s: float = Field(
        default=0.0, ge=0, description="after a violation the endpoint stays closed this long (documented for create)"
    )


def _documented_rate_limits() -> dict[Endpoint, RateLimit]:
    # vast.ai's published thresholds (docs rate-limits-and-errors.mdx, x-rate-limit in the OpenAPI yaml); search
    # is "10 requests per minute per IP", expressed here as a 6 s interval
    return {
        Endpoint.SEARCH: RateLimit(min_interval_s=6.0),
        Endpoint.CREATE: RateLimit(min_interval_s=4.5, penalty_s=12.0),
        Endpoint.DESTROY: RateLimit(min_interval_s=3.0),
        Endpoint.SHOW: RateLimit(min_interval_s=2.0),
        Endpoint.LIST_V1: RateLimit(min_interval_s=1.0),
        Endpoint.LIST_V0: RateLimit(min_interval_s=1.0),
        Endpoint.MANAGE: RateLimit(min_interval_s=1.0),
        Endpoint.BID_PRICE: RateLimit(min_interval_s=5.5),
    }


class ApiBehaviour(_Strict):
    """How the API answers, faults included. The switches can also be flipped at run time (admin routes)."""

    rate_limits: dict[Endpoint, RateLimit] = Field(default_factory=_documented_rate_limits)
    rate_limit_body: Literal["text", "json"] = Field(
        default="text", description="plain 'API requests too frequent…' or the OpenAPI's JSON {detail}"
    )
    v0_list: Literal["gone", "ok"] = Field(
        default="gone", description="GET /api/v0/instances/: 410 deprecated_endpoint, or the old answer"
    )
    bad_key_status: Literal[401, 404] = Field(default=404, description="vast often answers a bad key with 404")
    server_error_rate: float = Field(default=0.0, ge=0, le=1, description="share of API requests answered 5xx")
    server_error_statuses: list[int] = Field(default_factory=lambda: [500, 502, 503, 504], min_length=1)
    slow_response_rate: float = Field(default=0.0, ge=0, le=1, description="share of requests answered late")
    slow_response_wall_s: float = Field(default=3.0, ge=0)
    max_page_size: int = Field(default=25, ge=1, description="GET /api/v1/instances/ caps `limit` here")
    default_search_limit: int = Field(default=64, ge=1)


class SpeedSpread(_Strict):
    """How far machines' real pace strays from the catalog's (shared/gpu_models), drawn from the seed: one factor
    per GPU model (the catalog's figure is off for it) and one per machine (its host's cooling, PCIe, CPU)."""

    model_spread: float = Field(default=0.15, ge=0, le=0.9, description="each model's factor within 1 ± this")
    host_spread: float = Field(default=0.15, ge=0, le=0.9, description="each machine's factor within 1 ± this")


class Billing(_Strict):
    """What the ledger charges, by state (vast's billing docs): storage for the instance's whole life except while
    its host is offline, the GPU price only while the container may run, and the image pull's bytes at the
    machine's `inet_down_cost`.

    `gpu_billed_from` is where a run's GPU time starts: `pulled` (default) when the image pull ends and the
    container starts (vast: "not charged during loading", i.e. the download, and charged while running, which
    includes the worker's own warm-up the simulator still shows as `loading`); `running` when the simulator shows
    `running`; `created` from the start of the run (the image pull paid too).
    """

    storage_usd_per_gb_month: float = Field(default=0.15, ge=0)
    gpu_billed_from: Literal["pulled", "running", "created"] = "pulled"


class Scenario(_Strict):
    """A whole simulated vast.ai account and market. Every field has a default: `Scenario()` is a usable world."""

    seed: int = 0
    market: list[MarketSegment] = Field(
        default_factory=lambda: [
            MarketSegment(gpu_model="RTX 4090", count=30),
            MarketSegment(gpu_model="RTX 5090", count=15),
            MarketSegment(gpu_model="RTX 3090", count=20),
            MarketSegment(gpu_model="RTX PRO 6000", count=6),
            MarketSegment(gpu_model="A100 SXM4", count=6),
            MarketSegment(gpu_model="H100 SXM", count=4),
            MarketSegment(gpu_model="H200", count=2),
        ]
    )
    offers: list[OfferSpec] = Field(default_factory=list, description="exact offers, listed besides the segments")
    dynamics: MarketDynamics = Field(default_factory=MarketDynamics)
    startup: StartupSpec = Field(default_factory=StartupSpec)
    stop_start: StopStart = Field(default_factory=StopStart)
    bids: BidMarket = Field(default_factory=BidMarket)
    fates: FateShares = Field(default_factory=FateShares)
    speed: SpeedSpread = Field(default_factory=SpeedSpread)
    machine_fates: dict[int, Fate] = Field(default_factory=dict, description="machine_id → forced fate")
    api: ApiBehaviour = Field(default_factory=ApiBehaviour)
    billing: Billing = Field(default_factory=Billing)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """From a .yaml/.yml or .json file; errors name the field and the value."""
        text = Path(path).read_text()
        if Path(path).suffix.lower() in (".yaml", ".yml"):
            return cls.model_validate(yaml.safe_load(text) or {})
        return cls.model_validate_json(text)

    @classmethod
    def quiet(cls, **overrides: Any) -> Scenario:
        """No rate limits, no random faults, no market motion, healthy machines at the catalog's pace, no image to
        pull, no competing bids, a stopped GPU never taken: a base for exact tests."""
        base: dict[str, Any] = {
            "market": [],
            "dynamics": {"price_drift_per_h": 0, "taken_by_others_per_h": 0, "new_offers_per_h": 0},
            "startup": {"image_gb": 0},
            "stop_start": {"gpu_taken_per_stopped_h": 0},
            "bids": {
                "start_share": {"min": 0, "max": 0},
                "share_bounds": {"min": 0, "max": 1.1},
                "volatility_per_h": 0,
            },
            "fates": {"stuck_loading": 0, "exit_error": 0, "offline_later": 0, "slow": 0},
            "speed": {"model_spread": 0, "host_spread": 0},
            "api": {"rate_limits": {}},
        }
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        return cls.model_validate(base)
