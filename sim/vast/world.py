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
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared import gpu_models
from sim.vast.query import Query, QueryError, parse_filters, parse_order
from sim.vast.scenario import Fate, MarketSegment, OfferSpec, Scenario

HOURS_PER_MONTH = 730.0
FIRST_INSTANCE_ID = 33_032_701  # vast contract ids are eight-digit integers
FIRST_OFFER_ID = 4_100_001
FIRST_MACHINE_ID = 12_001
FIRST_HOST_ID = 90_001
SSH_PORT = 22


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
    forced_fate: Fate | None = None

    def row(self, allocated_storage_gb: float, storage_usd_per_gb_month: float) -> dict[str, Any]:
        """The offer as `POST /api/v0/bundles/` returns it (the fields vast-cli's `offers_fields` lists)."""
        storage_usd_per_h = storage_usd_per_gb_month * allocated_storage_gb / HOURS_PER_MONTH
        dph_total = self.dph_base + storage_usd_per_h
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
            "min_bid": round(self.dph_base * 0.6, 6),
            "storage_cost": storage_usd_per_gb_month,
            "inet_up_cost": 0.005,
            "inet_down_cost": 0.005,
            "dlperf": round(dlperf, 3),
            "dlperf_per_dphtotal": round(dlperf / dph_total, 3) if dph_total else 0.0,
            "score": round(dlperf / dph_total * self.reliability, 3) if dph_total else 0.0,
            "reliability": self.reliability,
            "reliability2": self.reliability,
            "inet_up": 800.0,
            "inet_down": 900.0,
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
            "is_bid": False,
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
    dph_base: float
    dph_total: float
    storage_usd_per_h: float
    is_bid: bool
    created_at: datetime
    fate: Fate
    startup_s: float
    throughput_factor: float  # of the GPU model's reference throughput
    offline_at: datetime | None
    exit_message: str
    label: str | None
    intended: Literal["running", "stopped"] = "running"
    started_at: datetime | None = None  # the current run's start (creation, or a restart)
    start_delay_s: float = 0.0
    destroyed_at: datetime | None = None
    closed_gpu_billed_s: float = 0.0  # GPU time of finished runs

    @property
    def first_run(self) -> bool:
        return self.started_at == self.created_at


@dataclass(frozen=True)
class StatusTimings:
    provisioning_s: float
    created_s: float


class LedgerEntry(BaseModel):
    """One instance's account: what it cost up to the ledger's moment."""

    instance_id: int
    label: str | None
    offer_id: int
    machine_id: int
    host_id: int
    gpu_name: str
    num_gpus: int
    dph_total: float
    fate: Fate
    throughput_factor: float
    created_at: datetime
    destroyed_at: datetime | None
    gpu_billed_s: float
    storage_billed_s: float
    cost_usd: float


class Ledger(BaseModel):
    """What the account really spent, and the most it ever had committed at once ($/h and instances)."""

    at: datetime
    entries: list[LedgerEntry]
    total_cost_usd: float
    committed_usd_per_h: float  # non-destroyed instances now, at their rented dph_total
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
        # separate streams: market motion must not depend on how many instances were created, and vice versa
        self._market_rng = random.Random(f"{seed}:market")
        self._fate_rng = random.Random(f"{seed}:fates")
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

    # ---- time -------------------------------------------------------------------------------------------
    def advance(self, now: datetime) -> None:
        """Run the market's whole ticks up to `now` (drift, offers taken by others, new offers)."""
        tick = timedelta(seconds=self.scenario.dynamics.tick_s)
        while self._ticked_until + tick <= now:
            self._ticked_until += tick
            self._tick()

    def _tick(self) -> None:
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

    # ---- offers -----------------------------------------------------------------------------------------
    def search(self, query: Query, now: datetime) -> list[Mapping[str, Any]]:
        self.advance(now)
        storage = self.scenario.billing.storage_usd_per_gb_month
        rows = [offer.row(query.allocated_storage_gb, storage) for _, offer in sorted(self.offers.items())]
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
        """Rent an offer; vast's checks and error codes for `PUT /api/v0/asks/{id}/`."""
        self.advance(now)
        offer = self.offers.get(offer_id)
        if offer is None:
            # cancel_unavail defaults to true for on-demand instances meant to run: "no longer available", 410
            cancel_unavail = request.cancel_unavail
            if cancel_unavail is None:
                cancel_unavail = request.price is None and request.target_state == "running"
            if offer_id in self.withdrawn and cancel_unavail:
                raise VastApiError(
                    410, "no_such_ask", f"error 410/3603: no_such_ask  Instance type by id {offer_id} is no longer "
                    "available.", ask_id=offer_id
                )  # fmt: skip
            raise VastApiError(
                404, "no_such_ask", f"error 404/3603: no_such_ask  Instance type by id {offer_id} is not available.",
                ask_id=offer_id,
            )  # fmt: skip
        _validate_create(request, offer)
        disk_gb = request.disk
        storage_usd_per_h = self.scenario.billing.storage_usd_per_gb_month * disk_gb / HOURS_PER_MONTH
        fate = self._draw_fate(offer)
        startup = self.scenario.startup.startup_s
        rng = self._fate_rng
        startup_s = rng.uniform(startup.min, startup.max)
        fates = self.scenario.fates
        throughput_factor = rng.uniform(fates.slow_factor.min, fates.slow_factor.max) if fate is Fate.SLOW else 1.0
        offline_at = None
        if fate is Fate.OFFLINE_LATER:
            offline_after_s = rng.uniform(fates.offline_after_s.min, fates.offline_after_s.max)
            offline_at = now + timedelta(seconds=self._run_delay_s(startup_s, first=True) + offline_after_s)
        exit_message = rng.choice(fates.exit_error_messages)
        env, ports = _container_env_and_ports(request)
        instance = SimInstance(
            instance_id=self._next_instance_id,
            offer=_copy_offer(offer),
            request=request,
            env=env,
            container_ports=ports,
            dph_base=offer.dph_base,
            dph_total=offer.dph_base + storage_usd_per_h,
            storage_usd_per_h=storage_usd_per_h,
            is_bid=request.price is not None,
            created_at=now,
            fate=fate,
            startup_s=startup_s,
            throughput_factor=throughput_factor,
            offline_at=offline_at,
            exit_message=exit_message,
            label=request.label,
            intended=request.target_state,
            started_at=now if request.target_state == "running" else None,
            start_delay_s=startup_s,
        )
        self._next_instance_id += 1
        self.instances[instance.instance_id] = instance
        del self.offers[offer_id]
        self.withdrawn[offer_id] = offer
        self.commitments.append((now, instance.dph_total, 1))
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
        self.advance(now)
        instance = self.live(instance_id)
        if state not in ("running", "stopped"):
            raise VastApiError(400, "invalid_args", f"state: expected 'running' or 'stopped', got {state!r}")
        if state == instance.intended:
            return
        if state == "stopped":
            instance.closed_gpu_billed_s += self._open_run_gpu_s(instance, now)
            instance.intended = "stopped"
            return
        first = instance.started_at is None
        instance.intended = "running"
        instance.started_at = now
        instance.start_delay_s = instance.startup_s if first else self.scenario.startup.restart_s

    def set_label(self, instance_id: int, label: str, now: datetime) -> None:
        self.advance(now)
        instance = self.live(instance_id)
        if len(label) > 256:
            raise VastApiError(400, "label_too_long", "label is longer than 256 characters")
        instance.label = label

    def destroy(self, instance_id: int, now: datetime) -> None:
        self.advance(now)
        instance = self.live(instance_id)
        if instance.intended == "running":
            instance.closed_gpu_billed_s += self._open_run_gpu_s(instance, now)
        instance.intended = "stopped"
        instance.destroyed_at = now
        self.commitments.append((now, -instance.dph_total, -1))
        offer_id = instance.offer.offer_id
        if self.scenario.dynamics.returned_after_destroy and self.withdrawn.get(offer_id) is not None:
            self.offers[offer_id] = self.withdrawn.pop(offer_id)

    # ---- status -----------------------------------------------------------------------------------------
    def status(self, instance: SimInstance, now: datetime) -> tuple[str | None, str]:
        """(`actual_status`, `status_msg`) at `now`."""
        if instance.offline_at is not None and now >= instance.offline_at:
            return "offline", "Host is offline: no heartbeat from the machine"
        if instance.intended == "stopped" or instance.started_at is None:
            return "stopped", "Instance stopped"
        age_s = (now - instance.started_at).total_seconds()
        timings = self.scenario.startup
        image = instance.request.image or "template"
        if instance.first_run and age_s < timings.provisioning_s:
            return None, ""
        if instance.first_run and age_s < timings.provisioning_s + timings.created_s:
            return "created", "Instance created, waiting for host"
        if age_s < self._run_delay_s(instance.start_delay_s, first=instance.first_run):
            return "loading", f"Pulling image {image}"
        if instance.fate is Fate.STUCK_LOADING:
            return "loading", f"Pulling image {image}"
        if instance.fate is Fate.EXIT_ERROR:
            return "exited", instance.exit_message
        return "running", f"success, running {image}"

    def running_since(self, instance: SimInstance) -> datetime | None:
        """When the current run reached (or will reach) `running`; None if its fate never gets there."""
        if instance.started_at is None or instance.fate in (Fate.STUCK_LOADING, Fate.EXIT_ERROR):
            return None
        return instance.started_at + timedelta(
            seconds=self._run_delay_s(instance.start_delay_s, first=instance.first_run)
        )

    def _run_delay_s(self, start_delay_s: float, *, first: bool) -> float:
        timings = self.scenario.startup
        return max(start_delay_s, timings.provisioning_s + timings.created_s) if first else start_delay_s

    def _open_run_gpu_s(self, instance: SimInstance, now: datetime) -> float:
        if instance.intended != "running" or instance.started_at is None:
            return 0.0
        if self.scenario.billing.gpu_billed_from == "created":
            billed_from: datetime | None = instance.started_at
        else:
            billed_from = self.running_since(instance)
        if billed_from is None:
            return 0.0
        until = min(now, instance.offline_at) if instance.offline_at else now  # vast stops billing an offline host
        return max(0.0, (until - billed_from).total_seconds())

    # ---- what the API returns ---------------------------------------------------------------------------
    def instance_row(self, instance: SimInstance, now: datetime) -> dict[str, Any]:
        """An instance as the list and show endpoints return it."""
        actual, message = self.status(instance, now)
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
            "intended_status": instance.intended,
            "cur_state": instance.intended,
            "next_state": instance.intended,
            "status_msg": message,
            "label": instance.label,
            "start_date": instance.created_at.timestamp(),
            "end_date": (instance.created_at + timedelta(days=30)).timestamp(),
            "dph_total": round(instance.dph_total, 6),
            "dph_base": round(instance.dph_base, 6),
            "is_bid": instance.is_bid,
            "min_bid": round(instance.dph_base * 0.6, 6),
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
        """What only a simulator can tell: the fate, the container's environment, the throughput factor."""
        actual, message = self.status(instance, now)
        since = self.running_since(instance)
        return {
            "instance_id": instance.instance_id,
            "fate": instance.fate.value,
            "throughput_factor": instance.throughput_factor,
            "startup_s": instance.startup_s,
            "running_since": since.isoformat() if since else None,
            "offline_at": instance.offline_at.isoformat() if instance.offline_at else None,
            "destroyed_at": instance.destroyed_at.isoformat() if instance.destroyed_at else None,
            "actual_status": actual,
            "status_msg": message,
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
        entries = []
        for _, instance in sorted(self.instances.items()):
            end = instance.destroyed_at or now
            gpu_s = instance.closed_gpu_billed_s
            if instance.destroyed_at is None:
                gpu_s += self._open_run_gpu_s(instance, now)
            storage_s = max(0.0, (end - instance.created_at).total_seconds())
            cost = instance.dph_base * gpu_s / 3600.0 + instance.storage_usd_per_h * storage_s / 3600.0
            entries.append(
                LedgerEntry(
                    instance_id=instance.instance_id,
                    label=instance.label,
                    offer_id=instance.offer.offer_id,
                    machine_id=instance.offer.machine_id,
                    host_id=instance.offer.host_id,
                    gpu_name=instance.offer.gpu_name,
                    num_gpus=instance.offer.num_gpus,
                    dph_total=round(instance.dph_total, 6),
                    fate=instance.fate,
                    throughput_factor=instance.throughput_factor,
                    created_at=instance.created_at,
                    destroyed_at=instance.destroyed_at,
                    gpu_billed_s=round(gpu_s, 3),
                    storage_billed_s=round(storage_s, 3),
                    cost_usd=round(cost, 6),
                )
            )
        committed, live, peak_committed, peak_live = 0.0, 0, 0.0, 0
        # destroys before creates at the same moment: a replacement made in the same instant is not a peak
        for _, delta_usd, delta_n in sorted(self.commitments, key=lambda c: (c[0], c[2])):
            committed += delta_usd
            live += delta_n
            peak_committed = max(peak_committed, committed)
            peak_live = max(peak_live, live)
        return Ledger(
            at=now,
            entries=entries,
            total_cost_usd=round(sum(e.cost_usd for e in entries), 6),
            committed_usd_per_h=round(max(committed, 0.0), 6),
            live_instances=live,
            peak_committed_usd_per_h=round(peak_committed, 6),
            peak_instances=peak_live,
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
        )
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
