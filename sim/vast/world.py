"""The simulated vast.ai account and market: offers, instances, their statuses over time, and the billing ledger.

Pure: every method takes `now`; nothing here reads a clock, sleeps or does I/O. The HTTP server wraps it.
Statuses are computed from an instance's fate and its timestamps, so any moment can be asked about.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared import gpu_models
from sim.vast.charges import DailyCharges, Totals
from sim.vast.economics import BidLevels, gpu_taken_chance, outbid, pull_s, pulled_gb
from sim.vast.economics import storage_usd_per_h as storage_cost_usd_per_h
from sim.vast.query import Query, QueryError, parse_filters, parse_order
from sim.vast.scenario import Fate, MarketSegment, OfferSpec, Scenario

FIRST_INSTANCE_ID = 33_032_701  # vast contract ids are eight-digit integers
FIRST_OFFER_ID = 4_100_001
FIRST_MACHINE_ID = 12_001
FIRST_HOST_ID = 90_001
SSH_PORT = 22
# a start that waits for a GPU which never comes back: far enough to outlast any run, near enough to add seconds to
FOREVER = datetime(9000, 1, 1, tzinfo=UTC)
# the bid_price endpoint's documented range (OpenAPI change_bid.yaml: >= 0.001 and <= 32.0 × the number of GPUs)
BID_PRICE_MIN = 0.001
BID_PRICE_MAX_PER_GPU = 32.0
# vast's console calls a start waiting for its GPU "Scheduling" (manage-instances.mdx, troubleshooting.mdx)
SCHEDULING_MESSAGE = "Scheduling: waiting for the machine's GPU, rented by someone else while this was stopped"
OUTBID_MESSAGE = "Outbid: paused (disk kept) until this instance's bid is the highest on the machine again"


class VastApiError(Exception):
    """An error the API answers with `{"success": false, "error": code, "msg": ...}` and an HTTP status."""

    def __init__(self, status: int, error: str, msg: str, **extra: Any) -> None:
        super().__init__(msg)
        self.status = status
        self.error = error
        self.msg = msg
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"success": False, "error": self.error, "msg": self.msg, **self.extra}


class CreateRequest(BaseModel):
    """The body of `PUT /api/v0/asks/{id}/`. vast accepts many more keys; unknown ones are ignored here too."""

    model_config = ConfigDict(extra="ignore")

    client_id: str | None = None
    image: str | None = None
    template_hash_id: str | None = None
    disk: float = Field(default=10.0, gt=0)
    label: str | None = None
    env: dict[str, Any] | str | None = None
    onstart: str | None = None
    args: list[str] | None = None
    args_str: str | None = None
    runtype: str | None = None
    price: float | None = Field(default=None, ge=0.001, le=128)
    target_state: Literal["running", "stopped"] = "running"
    cancel_unavail: bool | None = None
    image_login: str | None = None


@dataclass
class SimOffer:
    offer_id: int
    machine_id: int
    host_id: int
    gpu_name: str
    num_gpus: int
    dph_base: float  # whole-machine GPU price, $/h
    listed_price_usd_per_h: float  # the price it was listed at: drift stays within a band around it
    reliability: float
    verified: bool
    cuda_max_good: float
    disk_space_gb: float
    geolocation: str
    compute_cap: int
    gpu_ram_mb: int
    inet_down_mbps: float = 900.0
    inet_up_mbps: float = 800.0
    inet_down_cost_usd_per_gb: float = 0.005
    inet_up_cost_usd_per_gb: float = 0.005
    min_bid_share: float = 0.5
    forced_fate: Fate | None = None

    @property
    def min_bid(self) -> float:
        """The lowest interruptible bid the machine takes, $/h (moves with its price)."""
        return round(self.dph_base * self.min_bid_share, 6)

    def row(
        self, allocated_storage_gb: float, storage_usd_per_gb_month: float, offer_type: str = "on-demand"
    ) -> dict[str, Any]:
        """The offer as `POST /api/v0/bundles/` returns it (the fields vast-cli's `offers_fields` lists). A `bid`
        search prices it at `min_bid` (the OpenAPI: "bid (interruptible): uses minimum bid price")."""
        storage_usd_per_h = storage_cost_usd_per_h(storage_usd_per_gb_month, allocated_storage_gb)
        is_bid = offer_type == "bid"
        dph_total = (self.min_bid if is_bid else self.dph_base) + storage_usd_per_h
        model = gpu_models.find(self.gpu_name)
        dlperf = (model.reference_tasks_per_h if model else 60.0) * self.num_gpus / 10.0
        country = self.geolocation.rsplit(",", 1)[-1].strip()
        return {
            "id": self.offer_id,
            "ask_contract_id": self.offer_id,
            "bundle_id": self.offer_id,
            "machine_id": self.machine_id,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "num_gpus": self.num_gpus,
            "gpu_ram": self.gpu_ram_mb,
            "gpu_total_ram": self.gpu_ram_mb * self.num_gpus,
            "gpu_frac": 1.0,
            "gpu_arch": "nvidia",
            "compute_cap": self.compute_cap,
            "cpu_ram": 64_000 * self.num_gpus,
            "cpu_cores": 16 * self.num_gpus,
            "cpu_cores_effective": 16.0 * self.num_gpus,
            "cpu_arch": "amd64",
            "dph_base": round(self.dph_base, 6),
            "dph_total": round(dph_total, 6),
            "min_bid": self.min_bid,
            "storage_cost": storage_usd_per_gb_month,
            "inet_up_cost": self.inet_up_cost_usd_per_gb,
            "inet_down_cost": self.inet_down_cost_usd_per_gb,
            "dlperf": round(dlperf, 3),
            "dlperf_per_dphtotal": round(dlperf / dph_total, 3) if dph_total else 0.0,
            "score": round(dlperf / dph_total * self.reliability, 3) if dph_total else 0.0,
            "reliability": self.reliability,
            "reliability2": self.reliability,
            "inet_up": self.inet_up_mbps,
            "inet_down": self.inet_down_mbps,
            "cuda_max_good": self.cuda_max_good,
            "cuda_vers": self.cuda_max_good,
            "driver_version": "570.133.07" if self.cuda_max_good >= 12.8 else "550.54.15",
            "geolocation": self.geolocation,
            "country": country,
            "verification": "verified" if self.verified else "unverified",
            "verified": self.verified,
            "rentable": True,
            "rented": False,
            "external": False,
            "static_ip": False,
            "hosting_type": 0,  # 1: a datacenter (the CLI derives its `datacenter` flag from it)
            "vms_enabled": False,
            "is_bid": is_bid,
            "disk_space": self.disk_space_gb,
            "disk_bw": 2000.0,
            "direct_port_count": 20,
            "pcie_bw": 24.0,
            "pci_gen": 4.0,
            "duration": 30 * 86_400.0,
            "public_ipaddr": _ip_of(self.machine_id),
        }


@dataclass
class SimInstance:
    instance_id: int
    offer: SimOffer  # as it was when rented
    request: CreateRequest
    env: dict[str, str]
    container_ports: list[int]
    dph_base: float  # the GPU's $/h: the on-demand price, or the bid of an interruptible instance
    dph_total: float
    storage_usd_per_h: float
    is_bid: bool
    created_at: datetime
    fate: Fate
    startup_s: float  # a first start, create → running: the image pull and the rest
    pull_s: float  # the image pull within startup_s
    pull_gb: float  # what that pull downloads (less on a machine that had the image cached)
    image_cached: bool  # the machine had run the image before this instance was created
    throughput_factor: float  # of the GPU model's reference throughput
    offline_at: datetime | None
    exit_message: str
    label: str | None
    intended: Literal["running", "stopped"] = "running"  # what the renter asked for
    # the current run: from creation, a start or a resume, until a stop, a pause or the destroy (None: no run)
    started_at: datetime | None = None  # in the future while the start waits for a GPU someone else holds
    start_delay_s: float = 0.0
    run_is_first: bool = False  # the run begun at creation shows `null` and `created` first
    run_pull_s: float = 0.0
    run_pull_gb: float = 0.0
    gpu_taken: bool = False  # the current run waits ("scheduling") for a GPU rented by someone else meanwhile
    ever_ran: bool = False
    image_on_disk: bool = False
    stopped_at: datetime | None = None
    outbid_since: datetime | None = None  # an interruptible instance paused by a higher bid
    destroyed_at: datetime | None = None
    closed_gpu_billed_s: float = 0.0  # GPU time of finished runs (and of a run's part before a bid change)
    closed_gpu_cost_usd: float = 0.0
    closed_download_gb: float = 0.0
    gpu_segment_from: datetime | None = None  # a bid change restarts the open run's billing at its new price
    committed_usd_per_h: float = 0.0

    @property
    def image(self) -> str:
        return self.request.image or f"template:{self.request.template_hash_id}"


class LedgerEntry(BaseModel):
    """One instance's account: what it cost up to the ledger's moment, part by part (GPU, storage, bandwidth)."""

    instance_id: int
    label: str | None
    offer_id: int
    machine_id: int
    host_id: int
    gpu_name: str
    num_gpus: int
    dph_total: float
    is_bid: bool
    fate: Fate
    throughput_factor: float
    created_at: datetime
    destroyed_at: datetime | None
    gpu_billed_s: float
    storage_billed_s: float
    download_gb: float
    gpu_cost_usd: float
    storage_cost_usd: float
    bandwidth_cost_usd: float
    cost_usd: float  # the three parts together


class Ledger(BaseModel):
    """What the account really spent, and the most it ever had committed at once ($/h and instances)."""

    at: datetime
    entries: list[LedgerEntry]
    total_cost_usd: float
    gpu_cost_usd: float
    storage_cost_usd: float
    bandwidth_cost_usd: float
    # non-destroyed instances now: storage, plus the GPU price of those meant to run (a stopped one frees it)
    committed_usd_per_h: float
    live_instances: int
    peak_committed_usd_per_h: float
    peak_instances: int


@dataclass
class VastWorld:
    scenario: Scenario
    start: datetime
    offers: dict[int, SimOffer] = field(default_factory=dict)  # listed now
    withdrawn: dict[int, SimOffer] = field(default_factory=dict)  # rented (by us or others): ask answers 410
    instances: dict[int, SimInstance] = field(default_factory=dict)  # destroyed ones stay, for the ledger
    machine_fates: dict[int, Fate] = field(default_factory=dict)
    commitments: list[tuple[datetime, float, int]] = field(default_factory=list)  # (at, Δ$/h, Δinstances)
    # fields an instance's rows carry whatever the world says: the nulls and odd values real accounts show
    # (a `dph_total: null`, a field of a type nobody expected), set by tests through `/_sim/instances/{id}/row`
    row_overrides: dict[int, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seed = self.scenario.seed
        # separate streams: market motion must not depend on how many instances were created, and vice versa;
        # the newer features draw from streams of their own so they leave the older draws as they were
        self._market_rng = random.Random(f"{seed}:market")
        self._fate_rng = random.Random(f"{seed}:fates")
        self._network_rng = random.Random(f"{seed}:network")
        self._stop_start_rng = random.Random(f"{seed}:stop-start")
        self.bid_levels = BidLevels(self.scenario.bids, random.Random(f"{seed}:bids"))
        # indexes, so each tick and each create look only at the instances concerned
        self._bid_instance_ids: set[int] = set()
        self._instances_by_machine: dict[int, list[int]] = {}
        self._ticked_until = self.start
        self._next_instance_id = FIRST_INSTANCE_ID
        self._next_offer_id = FIRST_OFFER_ID
        self._next_machine_id = FIRST_MACHINE_ID
        self._next_host_id = FIRST_HOST_ID
        self.machine_fates = dict(self.scenario.machine_fates)
        for spec in self.scenario.offers:
            self._add_offer_from_spec(spec)
        for segment in self.scenario.market:
            host_id = 0
            for i in range(segment.count):
                if i % segment.machines_per_host == 0:
                    host_id = self._new_host_id()
                self._add_offer_from_segment(segment, host_id)
        for gpu_name in sorted({offer.gpu_name for offer in self.offers.values()}):
            self.bid_levels.add_model(gpu_name)
        self.charges = DailyCharges(self._totals_at)
        self.charges.mark((), self.start)

    # ---- time -------------------------------------------------------------------------------------------
    def advance(self, now: datetime) -> None:
        """Run the market's whole ticks up to `now` (drift, offers taken by others, new offers, competing bids);
        the charges' totals at each midnight passed are taken first, before anything at `now` changes them."""
        self.charges.mark(self.instances, now)
        tick = timedelta(seconds=self.scenario.dynamics.tick_s)
        while self._ticked_until + tick <= now:
            self._ticked_until += tick
            self._tick(self._ticked_until)

    def _tick(self, at: datetime) -> None:
        dynamics = self.scenario.dynamics
        tick_h = dynamics.tick_s / 3600.0
        rng = self._market_rng
        if dynamics.price_drift_per_h > 0:
            sigma = dynamics.price_drift_per_h * math.sqrt(tick_h)
            for offer_id in sorted(self.offers):
                offer = self.offers[offer_id]
                step = min(max(rng.gauss(0.0, sigma), -dynamics.max_price_step), dynamics.max_price_step)
                low, high = 0.5 * offer.listed_price_usd_per_h, 2.0 * offer.listed_price_usd_per_h
                offer.dph_base = min(max(offer.dph_base * (1.0 + step), low), high)
        for _ in range(_poisson(rng, dynamics.taken_by_others_per_h * tick_h)):
            if self.offers:
                self.take_offer(rng.choice(sorted(self.offers)))
        segments = [s for s in self.scenario.market if s.count > 0]
        for _ in range(_poisson(rng, dynamics.new_offers_per_h * tick_h)):
            if segments:
                segment = rng.choices(segments, weights=[s.count for s in segments])[0]
                self._add_offer_from_segment(segment, self._new_host_id())
        self.bid_levels.tick(tick_h)
        self._settle_bids(at)

    # ---- offers -----------------------------------------------------------------------------------------
    def search(self, query: Query, now: datetime) -> list[Mapping[str, Any]]:
        self.advance(now)
        storage = self.scenario.billing.storage_usd_per_gb_month
        rows = [
            offer.row(query.allocated_storage_gb, storage, query.offer_type) for _, offer in sorted(self.offers.items())
        ]
        return query.apply(rows)

    def take_offer(self, offer_id: int) -> bool:
        """Another customer rents this offer: it leaves the market (renting it now answers 410)."""
        offer = self.offers.pop(offer_id, None)
        if offer is None:
            return False
        self.withdrawn[offer_id] = offer
        return True

    def set_machine_fate(self, machine_id: int, fate: Fate | None) -> None:
        if fate is None:
            self.machine_fates.pop(machine_id, None)
        else:
            self.machine_fates[machine_id] = fate

    # ---- instances --------------------------------------------------------------------------------------
    def create(self, offer_id: int, request: CreateRequest, now: datetime) -> SimInstance:
        """Rent an offer; vast's checks and error codes for `PUT /api/v0/asks/{id}/`. A `price` makes the instance
        interruptible at that bid; without one it is on-demand, whatever the search asked for."""
        self.advance(now)
        offer = self.offers.get(offer_id)
        if offer is None:
            # cancel_unavail defaults to true for on-demand instances meant to run: "no longer available", 410
            if offer_id in self.withdrawn and _cancel_unavail(request):
                raise VastApiError(
                    410, "no_such_ask", f"error 410/3603: no_such_ask  Instance type by id {offer_id} is no longer "
                    "available.", ask_id=offer_id
                )  # fmt: skip
            raise VastApiError(
                404, "no_such_ask", f"error 404/3603: no_such_ask  Instance type by id {offer_id} is not available.",
                ask_id=offer_id,
            )  # fmt: skip
        _validate_create(request, offer)
        losing = request.price is not None and self._outbid(request.price, offer)
        if losing and request.target_state == "running" and _cancel_unavail(request):
            raise VastApiError(
                410, "no_such_ask", f"error 410/3907: no_such_ask  Instance type {offer_id} is no longer available: "
                f"a higher bid holds the machine.", ask_id=offer_id
            )  # fmt: skip
        disk_gb = request.disk
        storage_usd_per_h = storage_cost_usd_per_h(self.scenario.billing.storage_usd_per_gb_month, disk_gb)
        fate = self._draw_fate(offer)
        startup = self.scenario.startup
        rng = self._fate_rng
        rest_s = rng.uniform(startup.startup_s.min, startup.startup_s.max)
        image = request.image or f"template:{request.template_hash_id}"
        cached = self._machine_has_image(offer.machine_id, image, now)
        download_gb = pulled_gb(startup, cached=cached)
        image_pull_s = pull_s(download_gb, offer.inet_down_mbps)
        startup_s = rest_s + image_pull_s
        fates = self.scenario.fates
        throughput_factor = rng.uniform(fates.slow_factor.min, fates.slow_factor.max) if fate is Fate.SLOW else 1.0
        offline_at = None
        if fate is Fate.OFFLINE_LATER:
            offline_after_s = rng.uniform(fates.offline_after_s.min, fates.offline_after_s.max)
            offline_at = now + timedelta(seconds=self._run_delay_s(startup_s, first=True) + offline_after_s)
        exit_message = rng.choice(fates.exit_error_messages)
        env, ports = _container_env_and_ports(request)
        gpu_usd_per_h = request.price if request.price is not None else offer.dph_base
        instance = SimInstance(
            instance_id=self._next_instance_id,
            offer=_copy_offer(offer),
            request=request,
            env=env,
            container_ports=ports,
            dph_base=gpu_usd_per_h,
            dph_total=gpu_usd_per_h + storage_usd_per_h,
            storage_usd_per_h=storage_usd_per_h,
            is_bid=request.price is not None,
            created_at=now,
            fate=fate,
            startup_s=startup_s,
            pull_s=image_pull_s,
            pull_gb=download_gb,
            image_cached=cached,
            throughput_factor=throughput_factor,
            offline_at=offline_at,
            exit_message=exit_message,
            label=request.label,
            intended=request.target_state,
            outbid_since=now if losing else None,
        )
        if instance.intended == "running" and not losing:
            self._begin_run(instance, now)
        self._next_instance_id += 1
        self.instances[instance.instance_id] = instance
        self._instances_by_machine.setdefault(offer.machine_id, []).append(instance.instance_id)
        if instance.is_bid:
            self._bid_instance_ids.add(instance.instance_id)
        del self.offers[offer_id]
        self.withdrawn[offer_id] = offer
        self.commitments.append((now, 0.0, 1))
        self._commit(instance, now)
        return instance

    def live(self, instance_id: int) -> SimInstance:
        instance = self.instances.get(instance_id)
        if instance is None or instance.destroyed_at is not None:
            raise VastApiError(
                404, "no_such_instance", f"error 404: no_such_instance  Instance {instance_id} not found."
            )
        return instance

    def live_instances(self, now: datetime) -> list[SimInstance]:
        self.advance(now)
        return [i for _, i in sorted(self.instances.items()) if i.destroyed_at is None]

    def set_state(self, instance_id: int, state: str, now: datetime) -> None:
        """Stop (the disk stays, storage is still billed, the GPU is freed) or start again. A start may find the
        GPU rented by someone else meanwhile: it then waits in "scheduling" until the GPU is free, maybe forever."""
        self.advance(now)
        instance = self.live(instance_id)
        if state not in ("running", "stopped"):
            raise VastApiError(400, "invalid_args", f"state: expected 'running' or 'stopped', got {state!r}")
        if state == instance.intended:
            return
        if state == "stopped":
            if instance.started_at is not None:
                self._close_run(instance, now)
            instance.intended = "stopped"
            instance.stopped_at = now
            self._commit(instance, now)
            return
        instance.intended = "running"
        self._commit(instance, now)
        if instance.outbid_since is not None:
            return  # the bid's turn comes when it is the highest again
        free_at = self._gpu_free_at(instance, now)
        self._begin_run(instance, free_at)
        instance.gpu_taken = free_at > now

    def change_bid(self, instance_id: int, price: Any, now: datetime) -> None:
        """`PUT /api/v0/instances/bid_price/{id}/`: a new bid for an interruptible instance, effective now. No price:
        the lowest that wins the machine now (vast-cli: "a winning bid price is used as the default")."""
        self.advance(now)
        instance = self.live(instance_id)
        if not instance.is_bid:
            raise VastApiError(
                400, "invalid_args", f"Instance {instance_id} is on-demand: an instance's type cannot change after "
                "it is rented; create an interruptible one with a price instead."
            )  # fmt: skip
        offer = instance.offer
        if price is None:
            competing = self.bid_levels.share(offer.gpu_name) * offer.dph_base
            price = max(offer.min_bid, round(competing + 0.001, 3))
        highest = BID_PRICE_MAX_PER_GPU * offer.num_gpus
        if not isinstance(price, int | float) or isinstance(price, bool) or not BID_PRICE_MIN <= price <= highest:
            raise VastApiError(
                400, "invalid_args", f"Please set a bid price >= {BID_PRICE_MIN} and <= {highest:g} (got {price!r})."
            )
        _check_min_bid(float(price), offer, ask_id=None)
        if instance.started_at is not None and instance.intended == "running":
            self._bank_gpu_time(instance, now)  # billed at the old bid until now
            instance.gpu_segment_from = now
        instance.dph_base = float(price)
        instance.dph_total = instance.dph_base + instance.storage_usd_per_h
        self._commit(instance, now)
        self._settle_bids(now)

    def set_bid_share(self, gpu_name: str, share: float, now: datetime) -> None:
        """Other renters' bid for a GPU model, as a share of each machine's on-demand price, from `now` on."""
        self.advance(now)
        self.bid_levels.set_share(gpu_name, share)
        self._settle_bids(now)

    def set_label(self, instance_id: int, label: str, now: datetime) -> None:
        self.advance(now)
        instance = self.live(instance_id)
        if len(label) > 256:
            raise VastApiError(400, "label_too_long", "label is longer than 256 characters")
        instance.label = label

    def destroy(self, instance_id: int, now: datetime) -> None:
        self.advance(now)
        instance = self.live(instance_id)
        if instance.started_at is not None:
            self._close_run(instance, now)
        instance.intended = "stopped"
        instance.destroyed_at = now
        self.commitments.append((now, -instance.committed_usd_per_h, -1))
        instance.committed_usd_per_h = 0.0
        self._bid_instance_ids.discard(instance_id)
        offer_id = instance.offer.offer_id
        if self.scenario.dynamics.returned_after_destroy and self.withdrawn.get(offer_id) is not None:
            self.offers[offer_id] = self.withdrawn.pop(offer_id)

    # ---- runs, pauses and bids ----------------------------------------------------------------------------
    def _begin_run(self, instance: SimInstance, at: datetime) -> None:
        """A run from `at`: the first pulls the image after `created`; later ones find it on disk (restart_s), or
        pull it again when an earlier run was stopped before its pull ended."""
        startup = self.scenario.startup
        instance.started_at = at
        instance.run_is_first = not instance.ever_ran
        instance.gpu_taken = False
        instance.gpu_segment_from = None
        if instance.image_on_disk:
            instance.run_pull_s, instance.run_pull_gb = 0.0, 0.0
            instance.start_delay_s = startup.restart_s
        else:
            instance.run_pull_s, instance.run_pull_gb = instance.pull_s, instance.pull_gb
            instance.start_delay_s = instance.startup_s
        instance.ever_ran = True

    def _bank_gpu_time(self, instance: SimInstance, at: datetime) -> None:
        """The run's GPU time so far, at its current price, into the instance's closed totals."""
        open_s = self._open_run_gpu_s(instance, at)
        instance.closed_gpu_billed_s += open_s
        instance.closed_gpu_cost_usd += open_s * instance.dph_base / 3600.0

    def _close_run(self, instance: SimInstance, at: datetime) -> None:
        self._bank_gpu_time(instance, at)
        instance.closed_download_gb += self._open_run_download_gb(instance, at)
        pulled_at = self._pull_end(instance)
        if pulled_at is not None and at >= pulled_at:
            instance.image_on_disk = True
        instance.started_at = None
        instance.gpu_taken = False
        instance.gpu_segment_from = None

    def _gpu_free_at(self, instance: SimInstance, now: datetime) -> datetime:
        """When a start gets its GPU: now, or later when someone rented it while the instance was stopped."""
        spec = self.scenario.stop_start
        rng = self._stop_start_rng
        stopped_s = (now - instance.stopped_at).total_seconds() if instance.stopped_at else 0.0
        taken = rng.random() < gpu_taken_chance(spec, stopped_s)
        free_after = spec.gpu_free_after_s
        wait_s = rng.uniform(free_after.min, free_after.max) if free_after is not None else None
        if not taken:
            return now
        return now + timedelta(seconds=wait_s) if wait_s is not None else FOREVER

    def _outbid(self, bid_usd_per_h: float, offer: SimOffer) -> bool:
        return outbid(bid_usd_per_h, offer.dph_base, self.bid_levels.share(offer.gpu_name))

    def _settle_bids(self, at: datetime) -> None:
        """Pause the interruptible instances a higher bid now outranks; resume those whose bid is highest again."""
        for instance_id in sorted(self._bid_instance_ids):
            instance = self.instances[instance_id]
            losing = self._outbid(instance.dph_base, instance.offer)
            if losing and instance.outbid_since is None:
                if instance.started_at is not None:
                    self._close_run(instance, at)
                instance.outbid_since = at
            elif not losing and instance.outbid_since is not None:
                instance.outbid_since = None
                if instance.intended == "running":
                    self._begin_run(instance, at)

    def _commit(self, instance: SimInstance, at: datetime) -> None:
        """What the instance holds the account to now: its storage, and its GPU price while meant to run."""
        gpu_usd_per_h = instance.dph_base if instance.intended == "running" else 0.0
        committed = instance.storage_usd_per_h + gpu_usd_per_h
        self.commitments.append((at, committed - instance.committed_usd_per_h, 0))
        instance.committed_usd_per_h = committed

    def _machine_has_image(self, machine_id: int, image: str, now: datetime) -> bool:
        """Whether an instance on this machine (live or destroyed) finished pulling the image by `now`: its layers
        are in the machine's docker cache."""
        for other_id in self._instances_by_machine.get(machine_id, []):
            other = self.instances[other_id]
            if other.image != image:
                continue
            pulled_at = self._pull_end(other)
            if other.image_on_disk or (pulled_at is not None and pulled_at <= now and other.destroyed_at is None):
                return True
        return False

    # ---- status -----------------------------------------------------------------------------------------
    def status(self, instance: SimInstance, now: datetime) -> tuple[str | None, str]:
        """(`actual_status`, `status_msg`) at `now`."""
        if instance.offline_at is not None and now >= instance.offline_at:
            return "offline", "Host is offline: no heartbeat from the machine"
        if instance.intended == "stopped":
            return "stopped", "Instance stopped"
        if instance.outbid_since is not None:
            return "stopped", OUTBID_MESSAGE
        if instance.started_at is None:
            return "stopped", "Instance stopped"
        if now < instance.started_at:
            return "stopped", SCHEDULING_MESSAGE
        age_s = (now - instance.started_at).total_seconds()
        timings = self.scenario.startup
        first = instance.run_is_first
        if first and age_s < timings.provisioning_s:
            return None, ""
        if first and age_s < timings.provisioning_s + timings.created_s:
            return "created", "Instance created, waiting for host"
        pulled_at = self._pull_end(instance)
        if instance.fate is Fate.STUCK_LOADING or (pulled_at is not None and now < pulled_at):
            return "loading", f"Pulling image {instance.image}"
        if age_s < self._run_delay_s(instance.start_delay_s, first=first):
            return "loading", f"Image {instance.image} on disk, starting the container"
        if instance.fate is Fate.EXIT_ERROR:
            return "exited", instance.exit_message
        return "running", f"success, running {instance.image}"

    def contract_states(self, instance: SimInstance, now: datetime) -> tuple[str, str, str]:
        """(`intended_status`, `cur_state`, `next_state`): a stopped or outbid instance is `stopped` in all three
        (dstack reads an outbid instance so); a start waiting for its GPU is meant to run on a stopped contract."""
        if instance.intended == "stopped" or instance.outbid_since is not None or instance.started_at is None:
            return "stopped", "stopped", "stopped"
        if now < instance.started_at:
            return "running", "stopped", "running"
        return "running", "running", "running"

    def running_since(self, instance: SimInstance) -> datetime | None:
        """When the current run reached (or will reach) `running`; None if its fate never gets there."""
        if instance.started_at is None or instance.fate in (Fate.STUCK_LOADING, Fate.EXIT_ERROR):
            return None
        return instance.started_at + timedelta(
            seconds=self._run_delay_s(instance.start_delay_s, first=instance.run_is_first)
        )

    def _pull_end(self, instance: SimInstance) -> datetime | None:
        """When the current run's image pull ends (the container starts); None without a run or when stuck."""
        if instance.started_at is None or instance.fate is Fate.STUCK_LOADING:
            return None
        timings = self.scenario.startup
        before_s = timings.provisioning_s + timings.created_s if instance.run_is_first else 0.0
        run_delay_s = self._run_delay_s(instance.start_delay_s, first=instance.run_is_first)
        return instance.started_at + timedelta(seconds=min(before_s + instance.run_pull_s, run_delay_s))

    def _run_delay_s(self, start_delay_s: float, *, first: bool) -> float:
        timings = self.scenario.startup
        return max(start_delay_s, timings.provisioning_s + timings.created_s) if first else start_delay_s

    def _open_run_gpu_s(self, instance: SimInstance, now: datetime) -> float:
        if instance.intended != "running" or instance.started_at is None:
            return 0.0
        rule = self.scenario.billing.gpu_billed_from
        billed_from: datetime | None
        if rule == "created":
            billed_from = instance.started_at
        elif self.running_since(instance) is None:
            billed_from = None  # stuck pulling, or the container never starts: never charged as running
        elif rule == "pulled":
            billed_from = self._pull_end(instance)
        else:
            billed_from = self.running_since(instance)
        if billed_from is None:
            return 0.0
        if instance.gpu_segment_from is not None:
            billed_from = max(billed_from, instance.gpu_segment_from)
        until = min(now, instance.offline_at) if instance.offline_at else now  # vast stops billing an offline host
        return max(0.0, (until - billed_from).total_seconds())

    def _open_run_download_gb(self, instance: SimInstance, now: datetime) -> float:
        """What the current run's pull has downloaded by `now` (at the link's pace)."""
        if instance.started_at is None or instance.run_pull_gb <= 0:
            return 0.0
        timings = self.scenario.startup
        before_s = timings.provisioning_s + timings.created_s if instance.run_is_first else 0.0
        pulling_s = (now - instance.started_at).total_seconds() - before_s
        if instance.run_pull_s <= 0:
            return instance.run_pull_gb if pulling_s >= 0 else 0.0
        return instance.run_pull_gb * min(max(pulling_s / instance.run_pull_s, 0.0), 1.0)

    # ---- what the API returns ---------------------------------------------------------------------------
    def instance_row(self, instance: SimInstance, now: datetime) -> dict[str, Any]:
        """An instance as the list and show endpoints return it."""
        actual, message = self.status(instance, now)
        intended, cur_state, next_state = self.contract_states(instance, now)
        offer = instance.offer
        running = actual == "running"
        direct_port_start = 40_000 + (offer.machine_id % 500) * 20
        ports: dict[str, list[dict[str, str]]] = {}
        if running:
            for n, port in enumerate(instance.container_ports):
                ports[f"{port}/tcp"] = [{"HostIp": "0.0.0.0", "HostPort": str(direct_port_start + n)}]
        since = self.running_since(instance)
        uptime_mins = (now - since).total_seconds() / 60.0 if running and since else 0.0
        request = instance.request
        row = {
            "id": instance.instance_id,
            "actual_status": actual,
            "intended_status": intended,
            "cur_state": cur_state,
            "next_state": next_state,
            "status_msg": message,
            "label": instance.label,
            "start_date": instance.created_at.timestamp(),
            "end_date": (instance.created_at + timedelta(days=30)).timestamp(),
            "dph_total": round(instance.dph_total, 6),
            "dph_base": round(instance.dph_base, 6),
            "is_bid": instance.is_bid,
            "min_bid": offer.min_bid,
            "storage_cost": self.scenario.billing.storage_usd_per_gb_month,
            "inet_down": offer.inet_down_mbps,
            "inet_down_cost": offer.inet_down_cost_usd_per_gb,
            "inet_up_cost": offer.inet_up_cost_usd_per_gb,
            "ssh_host": f"ssh{(offer.machine_id % 9) + 1}.vast.ai",
            "ssh_port": 20_000 + instance.instance_id % 10_000,
            "public_ipaddr": _ip_of(offer.machine_id),
            "ports": ports,
            "direct_port_start": direct_port_start,
            "direct_port_end": direct_port_start + 19,
            "image_uuid": request.image,
            "image_args": request.args or [],
            "image_runtype": request.runtype or ("args" if request.args else "ssh"),
            "onstart": request.onstart,
            "extra_env": [[k, v] for k, v in sorted(_user_env(request).items())],
            "machine_id": offer.machine_id,
            "host_id": offer.host_id,
            "gpu_name": offer.gpu_name,
            "num_gpus": offer.num_gpus,
            "gpu_ram": offer.gpu_ram_mb,
            "gpu_util": 0.0 if not running else 95.0,
            "gpu_temp": 0.0 if not running else 64.0,
            "compute_cap": offer.compute_cap,
            "cuda_max_good": offer.cuda_max_good,
            "disk_space": request.disk,
            "geolocation": offer.geolocation,
            "reliability2": offer.reliability,
            "verification": "verified" if offer.verified else "unverified",
            "uptime_mins": round(uptime_mins, 2),
            "template_hash_id": request.template_hash_id,
        }
        return {**row, **self.row_overrides.get(instance.instance_id, {})}

    def list_page(self, params: Mapping[str, Any], now: datetime, *, max_page_size: int) -> dict[str, Any]:
        """`GET /api/v1/instances/`: filters, order, at most `max_page_size` rows, and a `next_token`."""
        filters = parse_filters(_mapping(params.get("select_filters") or {}, "select_filters"))
        order = parse_order(params.get("order_by") or [{"col": "id", "dir": "asc"}])
        raw_limit = params.get("limit", max_page_size)
        if not isinstance(raw_limit, int) or isinstance(raw_limit, bool):
            raise QueryError(f"limit: expected an integer, got {raw_limit!r}")
        limit = min(raw_limit, max_page_size) if raw_limit > 0 else 5
        rows = [self.instance_row(i, now) for i in self.live_instances(now)]
        selected = Query(filters=filters, order=order).apply(rows)
        offset = _decode_token(params["after_token"]) if params.get("after_token") else 0
        page = selected[offset : offset + limit]
        has_more = offset + limit < len(selected)
        label_counts: dict[str, int] = {}
        for row in rows:
            label = row["label"] or ""
            label_counts[label] = label_counts.get(label, 0) + 1
        return {
            "success": True,
            "instances": page,
            "instances_found": len(selected),
            "total_instances": len(rows),
            "label_counts": label_counts,
            "next_token": _encode_token(offset + limit) if has_more else None,
        }

    def sim_view(self, instance: SimInstance, now: datetime) -> dict[str, Any]:
        """What only a simulator can tell: the fate, the container's environment, the throughput factor, the
        startup's parts, whether a start waits for a GPU someone else holds, whether a bid is outbid."""
        actual, message = self.status(instance, now)
        since = self.running_since(instance)
        waiting = instance.started_at is not None and now < instance.started_at
        return {
            "instance_id": instance.instance_id,
            "fate": instance.fate.value,
            "throughput_factor": instance.throughput_factor,
            "startup_s": instance.startup_s,
            "pull_s": instance.pull_s,
            "pull_gb": instance.pull_gb,
            "image_cached": instance.image_cached,
            "running_since": since.isoformat() if since else None,
            "offline_at": instance.offline_at.isoformat() if instance.offline_at else None,
            "destroyed_at": instance.destroyed_at.isoformat() if instance.destroyed_at else None,
            "actual_status": actual,
            "status_msg": message,
            "is_bid": instance.is_bid,
            "bid_usd_per_h": instance.dph_base if instance.is_bid else None,
            "outbid_since": instance.outbid_since.isoformat() if instance.outbid_since else None,
            "gpu_taken": instance.gpu_taken,
            "gpu_free_at": (
                None
                if not waiting or instance.started_at is None or instance.started_at >= FOREVER
                else instance.started_at.isoformat()
            ),
            # vast sets these in every container: the worker reads its own instance id from them
            "container_env": {
                **instance.env,
                "CONTAINER_ID": str(instance.instance_id),
                "VAST_CONTAINERLABEL": f"C.{instance.instance_id}",
            },
            "onstart": instance.request.onstart,
            "label": instance.label,
            "offer_id": instance.offer.offer_id,
            "machine_id": instance.offer.machine_id,
            "host_id": instance.offer.host_id,
            "gpu_name": instance.offer.gpu_name,
            "num_gpus": instance.offer.num_gpus,
        }

    # ---- the ledger -------------------------------------------------------------------------------------
    def ledger(self, now: datetime) -> Ledger:
        self.advance(now)
        entries = [self._ledger_entry(instance, now) for _, instance in sorted(self.instances.items())]
        committed, live, peak_committed, peak_live = 0.0, 0, 0.0, 0
        # releases before commitments at the same moment: a replacement made in the same instant is not a peak
        for _, delta_usd, delta_n in sorted(self.commitments, key=lambda c: (c[0], c[2], c[1])):
            committed += delta_usd
            live += delta_n
            peak_committed = max(peak_committed, committed)
            peak_live = max(peak_live, live)
        return Ledger(
            at=now,
            entries=entries,
            total_cost_usd=round(sum(e.cost_usd for e in entries), 6),
            gpu_cost_usd=round(sum(e.gpu_cost_usd for e in entries), 6),
            storage_cost_usd=round(sum(e.storage_cost_usd for e in entries), 6),
            bandwidth_cost_usd=round(sum(e.bandwidth_cost_usd for e in entries), 6),
            committed_usd_per_h=round(max(committed, 0.0), 6),
            live_instances=live,
            peak_committed_usd_per_h=round(peak_committed, 6),
            peak_instances=peak_live,
        )

    def charge_rows(self, now: datetime, since: datetime | None = None) -> list[dict[str, Any]]:
        """vast's charge rows (`GET /api/v0/invoices?type=charge`): per instance, kind and UTC day."""
        self.advance(now)
        return self.charges.rows(self.instances, now, since)

    def _totals_at(self, instance_id: int, at: datetime) -> Totals | None:
        instance = self.instances.get(instance_id)
        if instance is None or instance.created_at > at:
            return None
        entry = self._ledger_entry(instance, at)
        return (
            entry.gpu_billed_s, entry.gpu_cost_usd, entry.storage_billed_s, entry.storage_cost_usd,
            entry.download_gb, entry.bandwidth_cost_usd,
        )  # fmt: skip

    def _ledger_entry(self, instance: SimInstance, now: datetime) -> LedgerEntry:
        end = instance.destroyed_at or now
        if instance.offline_at is not None:
            end = min(end, instance.offline_at)  # billing docs: no storage charge while the host is offline
        storage_s = max(0.0, (end - instance.created_at).total_seconds())
        gpu_s, gpu_cost_usd = instance.closed_gpu_billed_s, instance.closed_gpu_cost_usd
        download_gb = instance.closed_download_gb
        if instance.destroyed_at is None:
            open_s = self._open_run_gpu_s(instance, now)
            gpu_s += open_s
            gpu_cost_usd += open_s * instance.dph_base / 3600.0
            download_gb += self._open_run_download_gb(instance, now)
        storage_cost_usd = instance.storage_usd_per_h * storage_s / 3600.0
        bandwidth_cost_usd = download_gb * instance.offer.inet_down_cost_usd_per_gb
        gpu_cost_usd, storage_cost_usd, bandwidth_cost_usd = (
            round(gpu_cost_usd, 6), round(storage_cost_usd, 6), round(bandwidth_cost_usd, 6)
        )  # fmt: skip
        return LedgerEntry(
            instance_id=instance.instance_id,
            label=instance.label,
            offer_id=instance.offer.offer_id,
            machine_id=instance.offer.machine_id,
            host_id=instance.offer.host_id,
            gpu_name=instance.offer.gpu_name,
            num_gpus=instance.offer.num_gpus,
            dph_total=round(instance.dph_total, 6),
            is_bid=instance.is_bid,
            fate=instance.fate,
            throughput_factor=instance.throughput_factor,
            created_at=instance.created_at,
            destroyed_at=instance.destroyed_at,
            gpu_billed_s=round(gpu_s, 3),
            storage_billed_s=round(storage_s, 3),
            download_gb=round(download_gb, 6),
            gpu_cost_usd=gpu_cost_usd,
            storage_cost_usd=storage_cost_usd,
            bandwidth_cost_usd=bandwidth_cost_usd,
            cost_usd=round(gpu_cost_usd + storage_cost_usd + bandwidth_cost_usd, 6),
        )

    # ---- building the market ----------------------------------------------------------------------------
    def _new_host_id(self) -> int:
        self._next_host_id += 1
        return self._next_host_id - 1

    def _take_offer_id(self, wanted: int | None) -> int:
        if wanted is not None:
            if wanted in self.offers or wanted in self.withdrawn:
                raise ValueError(f"offer_id {wanted} is used twice")
            return wanted
        while self._next_offer_id in self.offers or self._next_offer_id in self.withdrawn:
            self._next_offer_id += 1
        self._next_offer_id += 1
        return self._next_offer_id - 1

    def _take_machine_id(self) -> int:
        self._next_machine_id += 1
        return self._next_machine_id - 1

    def _add_offer_from_spec(self, spec: OfferSpec) -> SimOffer:
        model = gpu_models.find(spec.gpu_model)
        offer = SimOffer(
            offer_id=self._take_offer_id(spec.offer_id),
            machine_id=spec.machine_id or self._take_machine_id(),
            host_id=spec.host_id or self._new_host_id(),
            gpu_name=model.name if model else spec.gpu_model,
            num_gpus=spec.num_gpus,
            dph_base=spec.price_usd_per_h,
            listed_price_usd_per_h=spec.price_usd_per_h,
            reliability=spec.reliability,
            verified=spec.verified,
            cuda_max_good=spec.cuda_max_good,
            disk_space_gb=spec.disk_space_gb,
            geolocation=spec.geolocation,
            compute_cap=model.compute_cap if model else 800,
            gpu_ram_mb=(model.gpu_ram_gb if model else 24) * 1000,
            inet_down_mbps=spec.inet_down_mbps,
            inet_up_mbps=spec.inet_up_mbps,
            inet_down_cost_usd_per_gb=spec.inet_down_cost_usd_per_gb,
            inet_up_cost_usd_per_gb=spec.inet_up_cost_usd_per_gb,
            min_bid_share=self.scenario.bids.min_bid_share,
            forced_fate=spec.fate,
        )
        self.offers[offer.offer_id] = offer
        return offer

    def _add_offer_from_segment(self, segment: MarketSegment, host_id: int) -> SimOffer:
        rng = self._market_rng
        model = gpu_models.find(segment.gpu_model)
        if segment.price_usd_per_h is not None:
            price = rng.uniform(segment.price_usd_per_h.min, segment.price_usd_per_h.max)
        else:
            assert model is not None  # the scenario validator guarantees one or the other
            typical = model.typical_price_usd_per_h * segment.num_gpus
            price = rng.uniform(0.85 * typical, 1.15 * typical)
        cuda = segment.cuda_max_good if segment.cuda_max_good is not None else (model.cuda_max_good if model else 12.4)
        offer = SimOffer(
            offer_id=self._take_offer_id(None),
            machine_id=self._take_machine_id(),
            host_id=host_id,
            gpu_name=model.name if model else segment.gpu_model,
            num_gpus=segment.num_gpus,
            dph_base=round(price, 4),
            listed_price_usd_per_h=round(price, 4),
            reliability=round(rng.uniform(segment.reliability.min, segment.reliability.max), 4),
            verified=rng.random() < segment.verified_share,
            cuda_max_good=cuda,
            disk_space_gb=round(rng.uniform(segment.disk_space_gb.min, segment.disk_space_gb.max)),
            geolocation=rng.choice(segment.geolocations),
            compute_cap=model.compute_cap if model else 800,
            gpu_ram_mb=(model.gpu_ram_gb if model else 24) * 1000,
            min_bid_share=self.scenario.bids.min_bid_share,
        )
        network = self._network_rng
        offer.inet_down_mbps = round(network.uniform(segment.inet_down_mbps.min, segment.inet_down_mbps.max), 1)
        offer.inet_up_mbps = offer.inet_down_mbps
        cost = segment.inet_down_cost_usd_per_gb
        offer.inet_down_cost_usd_per_gb = offer.inet_up_cost_usd_per_gb = round(network.uniform(cost.min, cost.max), 5)
        self.offers[offer.offer_id] = offer
        return offer

    def _draw_fate(self, offer: SimOffer) -> Fate:
        forced = self.machine_fates.get(offer.machine_id) or offer.forced_fate
        draw = self._fate_rng.random()  # drawn even when forced, so forcing one machine does not shift the rest
        if forced is not None:
            return forced
        shares = self.scenario.fates
        for fate, share in (
            (Fate.STUCK_LOADING, shares.stuck_loading),
            (Fate.EXIT_ERROR, shares.exit_error),
            (Fate.OFFLINE_LATER, shares.offline_later),
            (Fate.SLOW, shares.slow),
        ):
            if draw < share:
                return fate
            draw -= share
        return Fate.HEALTHY


def _validate_create(request: CreateRequest, offer: SimOffer) -> None:
    if not request.image and not request.template_hash_id:
        raise VastApiError(400, "invalid_args", "image: required unless template_hash_id is given")
    if request.image and len(request.image) > 1024:
        raise VastApiError(400, "invalid_args", "image: longer than 1024 characters")
    if request.label is not None and len(request.label) > 256:
        raise VastApiError(400, "label_too_long", "label: longer than 256 characters")
    args_len = len(" ".join(request.args or [])) + len(request.args_str or "") + len(request.onstart or "")
    if args_len > 4096:
        raise VastApiError(400, "invalid_args", f"args and onstart: {args_len} characters, more than 4096")
    if request.disk > offer.disk_space_gb:
        raise VastApiError(
            400, "invalid_args", f"disk: {request.disk} GB requested, the machine has {offer.disk_space_gb}"
        )
    if request.price is not None:
        _check_min_bid(request.price, offer, ask_id=offer.offer_id)


def _check_min_bid(price: float, offer: SimOffer, *, ask_id: int | None) -> None:
    # the create endpoint documents `invalid_price` among its 400 codes (OpenAPI create_instance.yaml); the
    # wording is the simulator's
    if price < offer.min_bid:
        extra = {"ask_id": ask_id} if ask_id is not None else {}
        raise VastApiError(
            400, "invalid_price", f"error 400: invalid_price  Bid price {price:g} $/h is below the machine's minimum "
            f"bid of {offer.min_bid:g} $/h.", **extra
        )  # fmt: skip


def _cancel_unavail(request: CreateRequest) -> bool:
    """vast's default: true for an on-demand instance meant to run, false for a bid (OpenAPI create_instance)."""
    if request.cancel_unavail is not None:
        return request.cancel_unavail
    return request.price is None and request.target_state == "running"


def _user_env(request: CreateRequest) -> dict[str, str]:
    """Environment variables from `env`: the SDK's dict (port flags are keys like "-p 8000:8000") or a flag string."""
    env: dict[str, str] = {}
    if isinstance(request.env, dict):
        for key, value in request.env.items():
            if not key.startswith("-"):
                env[key] = str(value)
    elif isinstance(request.env, str):
        tokens = request.env.split()
        for flag, value in itertools.pairwise(tokens):
            if flag == "-e" and "=" in value:
                key, _, val = value.partition("=")
                env[key] = val
    return env


def _container_ports(request: CreateRequest) -> list[int]:
    flags: list[str] = []
    if isinstance(request.env, dict):
        flags = [key for key in request.env if key.startswith("-p ")]
    elif isinstance(request.env, str):
        tokens = request.env.split()
        flags = [f"-p {value}" for flag, value in itertools.pairwise(tokens) if flag == "-p"]
    ports = [SSH_PORT]
    for flag in flags:
        container = flag[3:].strip().split(":")[-1].split("/")[0]
        if container.isdigit() and int(container) not in ports:
            ports.append(int(container))
    return ports


def _container_env_and_ports(request: CreateRequest) -> tuple[dict[str, str], list[int]]:
    return _user_env(request), _container_ports(request)


def _copy_offer(offer: SimOffer) -> SimOffer:
    return SimOffer(**{k: getattr(offer, k) for k in offer.__dataclass_fields__})


def _ip_of(machine_id: int) -> str:
    return f"203.0.{(machine_id // 250) % 250}.{machine_id % 250 + 1}"


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise QueryError(f"{name}: expected a JSON object, got {value!r}")
    return value


def _encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _decode_token(token: Any) -> int:
    try:
        offset = json.loads(base64.urlsafe_b64decode(str(token).encode()))["offset"]
        if not isinstance(offset, int) or offset < 0:
            raise ValueError
        return offset
    except Exception:
        raise QueryError(f"after_token: invalid token {str(token)[:40]!r}") from None
