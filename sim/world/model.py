"""The world's things: its configuration, the market it rents from, machines and their fates, what policies see and do.

One `sim.vast.scenario.Scenario` drives the market, the startup-time distribution and the failure shares, the
same file the vast.ai simulator serves; `WorldConfig` holds what only the world needs (the workload, billing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Literal, Protocol

import numpy as np

from services.provisioner.host_history import HostHistory, Incident, IncidentKind
from services.provisioner.ranking import URGENT_HORIZON_H, OfferConstraints, StartupModel, ThroughputKnowledge, rank
from services.provisioner.vast_models import VastOffer
from shared import gpu_models
from shared.contract import RemovalReason
from sim.vast.economics import gpu_taken_chance, pull_s, pulled_gb
from sim.vast.scenario import Fate, FloatRange, Scenario

# DESIGN.md: a proving task takes ~4 min of one machine; pipelined, a reference machine finishes one every ~30 s
TASK_S = 240.0
# sim/jobs: a running instance's worker registers ~10 min after vast says running (image start, registration)
REGISTRATION_S = 600.0
# after the trace ends, the fleet gets this long to clear its queue; tasks still queued then are charged to here
DRAIN_MAX_S = 12 * 3600.0
LAUNCH_DRAWS_BLOCK = 4096
INF = math.inf


@dataclass(frozen=True)
class WorldConfig:
    task_s: float = TASK_S
    registration_s: float = REGISTRATION_S
    drain_max_s: float = DRAIN_MAX_S
    # billing from creation: the rule (startup time is paid). vast itself bills the GPU from running;
    # "running" is there to measure what that difference does to a policy.
    billed_from: Literal["created", "running"] = "created"
    # machines at t=0, already producing; None sizes them for the trace's first hour
    initial_machines: int | None = None
    # the world's own cap on non-gone instances (the market is the other limit)
    max_instances: int = 5000
    sample_s: float | None = None  # time-series resolution for plots; None picks ~1500 points
    # a launch's GPU models: "strict" rents only those (what services/provisioner does today), "fallback" rents
    # the best other offer once they are gone (what the contract's word "preferred" suggests)
    gpu_preference: Literal["strict", "fallback"] = "strict"
    # each instance's disk (the provisioner's default allocation): billed at the scenario's storage price in every
    # state but gone, parked included
    disk_gb: float = 50.0


class MachineState(StrEnum):
    LOADING = "loading"  # created, billed, not producing yet (startup + registration)
    PRODUCING = "producing"
    DRAINING = "draining"  # takes no new task, finishes its in-flight ones, then gone
    OFFLINE = "offline"  # was producing, the host disconnected: billed until removed, no capacity
    EXITED = "exited"  # failed at the end of loading with a docker error: GPU not billed, its disk still is
    PARKED = "parked"  # stopped on vast after draining: keeps its disk (billed) and image, no GPU, no capacity
    RESUMING = "resuming"  # started again: minutes to running, or a wait in "scheduling" if its GPU was taken
    GONE = "gone"


@dataclass(frozen=True)
class Offer:
    offer_id: int
    gpu_model: str
    price_usd_per_h: float
    reference_tasks_per_h: float  # the catalog's pace for its GPUs: what a renter expects (and ranks offers by)
    fate: Fate | None = None  # forced by the scenario (OfferSpec.fate)
    tasks_per_h: float = 0.0  # its real pace when healthy; 0: the reference
    num_gpus: int = 1
    host_id: int = 0  # 0: a host of its own (the offer's id)
    inet_down_mbps: float = 0.0  # vast's `inet_down`: how fast its image pulls (0: not listed)

    def __post_init__(self) -> None:
        if self.tasks_per_h <= 0:
            object.__setattr__(self, "tasks_per_h", self.reference_tasks_per_h)
        if self.host_id <= 0:
            object.__setattr__(self, "host_id", self.offer_id)

    @property
    def machine_id(self) -> int:
        return self.offer_id  # one offer per machine in this market

    def as_vast_offer(self) -> VastOffer:
        """The row the provisioner would rank. Every offer is verified and equally reliable here: the world draws
        each launch's fate apart from the offer (the same luck for every policy's k-th launch), so a reliability
        score would rank by something the world does not act on."""
        return VastOffer(
            id=self.offer_id,
            machine_id=self.machine_id,
            host_id=self.host_id,
            gpu_name=self.gpu_model,
            num_gpus=self.num_gpus,
            dph_total=self.price_usd_per_h,
            reliability2=1.0,
            verified=True,
            inet_down=self.inet_down_mbps or None,
        )

    @property
    def usd_per_task(self) -> float:
        """Dollars per task at the catalog's pace: the renter's ranking."""
        return self.price_usd_per_h / self.reference_tasks_per_h


def offers_from_scenario(scenario: Scenario) -> list[Offer]:
    """Every machine the scenario lists, priced once from its seed (the world's market does not drift), each with
    its real pace: the catalog's, off by its model's and its machine's factors (`Scenario.speed`, drawn from the
    seed too), so a policy that trusts the priors sizes wrong and one that measures learns."""
    rng = np.random.default_rng([scenario.seed, 17])
    speed_rng = np.random.default_rng([scenario.seed, 23])  # its own stream: prices stay what they were
    link_rng = np.random.default_rng([scenario.seed, 31])  # and the links theirs: prices and paces unchanged
    model_factor: dict[str, float] = {}
    model_spread, host_spread = scenario.speed.model_spread, scenario.speed.host_spread

    def real_pace(gpu_model: str, reference: float) -> float:
        key = _canonical(gpu_model)
        if key not in model_factor:
            model_factor[key] = float(speed_rng.uniform(1 - model_spread, 1 + model_spread))
        return reference * model_factor[key] * float(speed_rng.uniform(1 - host_spread, 1 + host_spread))

    host_id, machines_left_on_host = 0, 0
    offers: list[Offer] = []
    for segment in scenario.market:
        model = gpu_models.find(segment.gpu_model)
        rate = (model.reference_tasks_per_h if model else gpu_models.REFERENCE_TASKS_PER_H_RTX_4090) * segment.num_gpus
        if segment.price_usd_per_h is not None:
            low, high = segment.price_usd_per_h.min, segment.price_usd_per_h.max
        else:
            assert model is not None  # the scenario validates unknown models carry a price
            typical = model.typical_price_usd_per_h * segment.num_gpus
            low, high = typical * 0.85, typical * 1.15
        for price in rng.uniform(low, high, segment.count):
            if machines_left_on_host == 0:  # the segment's machines share hosts as sim vast groups them
                host_id, machines_left_on_host = host_id + 1, segment.machines_per_host
            machines_left_on_host -= 1
            link = float(link_rng.uniform(segment.inet_down_mbps.min, segment.inet_down_mbps.max))
            offers.append(
                Offer(len(offers) + 1, segment.gpu_model, round(float(price), 4), rate,
                      tasks_per_h=real_pace(segment.gpu_model, rate), num_gpus=segment.num_gpus,
                      host_id=HOST_IDS_FROM + host_id, inet_down_mbps=round(link, 1))
            )  # fmt: skip
        machines_left_on_host = 0
    for spec in scenario.offers:
        model = gpu_models.find(spec.gpu_model)
        rate = (model.reference_tasks_per_h if model else gpu_models.REFERENCE_TASKS_PER_H_RTX_4090) * spec.num_gpus
        offers.append(
            Offer(len(offers) + 1, spec.gpu_model, spec.price_usd_per_h, rate, spec.fate,
                  tasks_per_h=real_pace(spec.gpu_model, rate), num_gpus=spec.num_gpus, host_id=spec.host_id or 0,
                  inet_down_mbps=spec.inet_down_mbps)
        )  # fmt: skip
    return offers


# host ids apart from offer ids (an offer alone on its host uses its own id as the host's)
HOST_IDS_FROM = 1_000_000
# the world's second 0 as a date: a Monday, as the bundled week starts on one. The production code the world runs
# reads dates: the provisioner's host history (its incidents fade over days), the guardrails, the services the
# predictive policy drives
EPOCH = datetime(2026, 1, 5, tzinfo=UTC)


def _canonical(name: str) -> str:
    model = gpu_models.find(name)
    return model.name if model else name


class Market:
    """Offers not in use, in the provisioner's own order (services/provisioner/ranking.rank), with the host history
    this world's machines leave as a real fleet's would: each machine's measured pace once it is benchmarked, each
    failure against its machine and host, and each GPU model's observed pace. A machine that turned out slow, or a
    host that failed, drops down the list when it is offered again, as it would with the provisioner.
    """

    def __init__(self, offers: Sequence[Offer], startup: StartupModel | None = None) -> None:
        self.offers = sorted(offers, key=lambda o: (o.usd_per_task, o.offer_id))
        # what the provisioner predicts a startup from (its settings IMAGE_GB, TYPICAL_STARTUP_S), for urgent launches
        self.startup = startup or StartupModel()
        self._has_image: set[int] = set()  # machines that pulled the image before: their layers are cached
        self._free: dict[int, Offer] = {offer.offer_id: offer for offer in self.offers}
        self._vast = {offer.offer_id: offer.as_vast_offer() for offer in self.offers}
        self._models = tuple(sorted({_canonical(offer.gpu_model) for offer in self.offers}))
        self.history = HostHistory()
        # a model the catalog does not know is ranked at the pace the world assumes for it until one is measured
        self._unknown_pace = {
            _canonical(o.gpu_model): o.reference_tasks_per_h / o.num_gpus
            for o in self.offers
            if gpu_models.find(o.gpu_model) is None
        }
        self._measured_pace: dict[str, tuple[float, int]] = {}  # by model: sum of per-GPU paces, machines
        self.knowledge = ThroughputKnowledge(dict(self._unknown_pace))

    def rent(
        self,
        gpu_models_wanted: Sequence[str] = (),
        max_price_usd_per_h: float | None = None,
        *,
        count: int = 1,
        now_s: float = 0.0,
        urgent: bool = False,
        fills_last_slots: bool = False,
    ) -> list[Offer]:
        """The `count` best free offers the provisioner would rent for this launch (fewer when the market is short);
        an urgent one (the provisioner's emergency launch) weighs each offer's predicted startup against its price."""
        wanted = tuple(dict.fromkeys(_canonical(name) for name in gpu_models_wanted)) or self._models
        constraints = OfferConstraints(
            allowed_gpu_models=wanted,
            max_price_usd_per_h=math.inf if max_price_usd_per_h is None else max_price_usd_per_h,
            verified_only=False,
        )
        ranked = rank(
            (self._vast[offer_id] for offer_id in self._free),
            constraints,
            self.knowledge,
            self.history,
            _at(now_s),
            urgent_horizon_h=URGENT_HORIZON_H if urgent else None,
            startup=self.startup,
            fills_last_slots=fills_last_slots,
        )
        return [self._free.pop(choice.offer.id) for choice in ranked[:count]]

    def release(self, offer: Offer) -> None:
        self._free[offer.offer_id] = offer

    def has_image(self, offer: Offer) -> bool:
        return offer.machine_id in self._has_image

    def started(self, offer: Offer, startup_s: float, now_s: float) -> None:
        """The machine reached running after `startup_s`: the provisioner learns its startup, and its disk now holds
        the image (a later rent of the same machine pulls only what the cache lacks)."""
        self._has_image.add(offer.machine_id)
        self.history.record_startup(offer.machine_id, offer.host_id, startup_s, _at(now_s))

    def image_on_disk(self, offer: Offer) -> None:
        """The machine ran the image before t=0 (the initial fleet)."""
        self._has_image.add(offer.machine_id)

    def measured(self, offer: Offer, tasks_per_h: float, now_s: float) -> None:
        """A benchmark of the machine: its pace against the catalog's, and its model's pace as the fleet sees it."""
        self.history.record_measure(offer.machine_id, tasks_per_h / offer.reference_tasks_per_h, _at(now_s))
        model = _canonical(offer.gpu_model)
        total, count = self._measured_pace.get(model, (0.0, 0))
        total, count = total + tasks_per_h / offer.num_gpus, count + 1
        self._measured_pace[model] = (total, count)
        self.knowledge = ThroughputKnowledge({**self.knowledge.observed_tasks_per_h_by_model, model: total / count})

    def failed(self, offer: Offer, kind: IncidentKind, instance_id: int, now_s: float) -> None:
        self.history.record(
            Incident(
                at=_at(now_s), kind=kind, instance_id=instance_id, host_id=offer.host_id, machine_id=offer.machine_id
            )
        )


def _at(now_s: float) -> datetime:
    return EPOCH + timedelta(seconds=now_s)


def initial_fleet_size(market: Market, arrivals_per_min: Sequence[int], world: WorldConfig) -> int:
    """Machines producing at t=0: as configured, else the cheapest offers that cover the first hour's rate."""
    if world.initial_machines is not None:
        return min(world.initial_machines, len(market.offers))
    first = arrivals_per_min[:60]
    first_hour_per_h = sum(first) * 60.0 / max(1, len(first))
    capacity, count = 0.0, 0
    for offer in market.offers:
        if capacity >= first_hour_per_h:
            break
        capacity += offer.reference_tasks_per_h
        count += 1
    return count


@dataclass(frozen=True)
class LaunchDraw:
    """The random parts of one launch, fixed by (seed, launch index): every policy's k-th launch gets the same."""

    fate: Fate
    startup_s: float
    offline_after_s: float
    slow_factor: float


class _Uniforms:
    """Row `index` of a seeded stream of uniforms, drawn a block at a time: the k-th row is the same whatever
    else was asked for, so every policy's k-th launch (or resume) gets the same luck."""

    def __init__(self, seed: int, stream: int, width: int) -> None:
        self._rng = np.random.default_rng([seed, stream])
        self._u: np.ndarray = np.empty((0, width))

    def __getitem__(self, index: int) -> list[float]:
        while index >= len(self._u):
            self._u = np.vstack([self._u, self._rng.random((LAUNCH_DRAWS_BLOCK, self._u.shape[1]))])
        return [float(x) for x in self._u[index]]


def startup_s(scenario: Scenario, offer: Offer, rest_s: float, *, cached: bool) -> float:
    """Create → running for one machine, as the vast simulator draws it: the rest of the startup (drawn per launch)
    plus the image pull over the offer's link, only what the cache lacks on a machine that ran the image before."""
    if offer.inet_down_mbps <= 0:
        return rest_s
    return rest_s + pull_s(pulled_gb(scenario.startup, cached=cached), offer.inet_down_mbps)


def startup_model(scenario: Scenario) -> StartupModel:
    """The provisioner's prediction, configured as a user would for this scenario: its image, its typical rest."""
    rest = scenario.startup.startup_s
    return StartupModel(image_gb=scenario.startup.image_gb, typical_startup_s=(rest.min + rest.max) / 2)


def _within(bounds: FloatRange, u: float) -> float:
    return bounds.min + (bounds.max - bounds.min) * u


class LaunchDraws:
    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        self._u = _Uniforms(seed, 29, 4)

    def __getitem__(self, index: int) -> LaunchDraw:
        u_fate, u_startup, u_offline, u_slow = self._u[index]
        shares = self.scenario.fates
        fate = Fate.HEALTHY
        edge = 0.0
        for candidate, share in (
            (Fate.STUCK_LOADING, shares.stuck_loading),
            (Fate.EXIT_ERROR, shares.exit_error),
            (Fate.OFFLINE_LATER, shares.offline_later),
            (Fate.SLOW, shares.slow),
        ):
            edge += share
            if u_fate < edge:
                fate = candidate
                break
        return LaunchDraw(
            fate=fate,
            startup_s=_within(self.scenario.startup.startup_s, u_startup),
            offline_after_s=_within(shares.offline_after_s, u_offline),
            slow_factor=_within(shares.slow_factor, u_slow),
        )


@dataclass(frozen=True)
class ResumeDraw:
    """The random parts of one resume, fixed by (seed, resume index) as launches are: whether the GPU was rented
    meanwhile (given the hours parked) and, if so, when it is free again (None: never)."""

    gpu_taken: bool
    free_after_s: float | None


class ResumeDraws:
    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        self._u = _Uniforms(seed, 37, 2)

    def draw(self, index: int, parked_s: float) -> ResumeDraw:
        u_taken, u_free = self._u[index]
        rules = self.scenario.stop_start
        taken = u_taken < gpu_taken_chance(rules, parked_s)
        if not taken:
            return ResumeDraw(False, None)
        free = rules.gpu_free_after_s
        return ResumeDraw(True, None if free is None else _within(free, u_free))


@dataclass(frozen=True)
class Schedule:
    """A machine's future, fixed by its fate at creation. The engine reads it; no policy may (inf: never)."""

    running_at_s: float
    ready_at_s: float
    exit_at_s: float
    offline_at_s: float


# an entity, equal only to itself: compared field by field, removing one from the engine's producing list took a
# tenth of a 1000-machine week's replay
@dataclass(eq=False)
class Machine:
    """One rented machine. Policies see it through `MachineView`, which leaves out its schedule and fate."""

    instance_id: int
    offer: Offer
    fate: Fate
    tasks_per_h: float  # what it really does (a slow machine less than its model's reference)
    created_s: float
    schedule: Schedule
    state: MachineState = MachineState.LOADING
    state_since_s: float = 0.0
    running_s: float | None = None  # when vast reported it running, once it has
    billed_since_s: float | None = None
    launched: bool = True  # False for the initial fleet, which no policy paid to start
    worked: bool = False  # started at least one task: a launch that never did is wasted
    prefix_order: int = 0  # tasks go to producing machines in this order (the job system fills the oldest first)
    tasks_started: float = 0.0
    last_task_s: float | None = None
    removal_reason: str = ""
    parking: bool = False  # draining to be parked, not given back
    bid_usd_per_h: float | None = None  # an interruptible machine's bid: what it is billed while it runs
    outbid: bool = False  # paused by a higher bid (parked by vast, not by a policy)
    # a resume that found its GPU rented by someone else: when it began to wait in vast's "scheduling"
    waiting_for_gpu_since_s: float | None = None
    loading_left_s: float = 0.0  # of its startup, when a bid was paused while loading
    # the current resume's moments (events of an earlier resume or of its creation do not match them)
    resume_running_s: float = INF
    resume_ready_s: float = INF

    @property
    def gpu_model(self) -> str:
        return self.offer.gpu_model

    @property
    def price_usd_per_h(self) -> float:
        return self.bid_usd_per_h if self.bid_usd_per_h is not None else self.offer.price_usd_per_h

    @property
    def reference_tasks_per_h(self) -> float:
        return self.offer.reference_tasks_per_h


# --- what a policy sees and does ---------------------------------------------------------------------------


class MachineView(Protocol):
    """What a policy may read about a machine: what the provisioner and the job system would show."""

    @property
    def instance_id(self) -> int: ...
    @property
    def gpu_model(self) -> str: ...
    @property
    def price_usd_per_h(self) -> float: ...
    @property
    def reference_tasks_per_h(self) -> float: ...
    @property
    def tasks_per_h(self) -> float: ...  # what its completions show (a slow machine less than its reference)
    @property
    def state(self) -> MachineState: ...
    @property
    def created_s(self) -> float: ...
    @property
    def state_since_s(self) -> float: ...
    @property
    def running_s(self) -> float | None: ...  # when vast reported it running, if it has
    @property
    def last_task_s(self) -> float | None: ...
    @property
    def tasks_started(self) -> float: ...
    @property
    def bid_usd_per_h(self) -> float | None: ...  # an interruptible machine's bid (vast lists `is_bid`), else None


@dataclass(frozen=True)
class FleetEvent:
    """Something the provisioner or the fleet service would notice about one machine."""

    at_s: float
    instance_id: int
    kind: Literal["created", "running", "producing", "exited", "offline", "gone", "parked", "resuming", "outbid"]


@dataclass(frozen=True)
class WorldView:
    """The world at a decision, as FleetPilot could observe it (no future, no fates)."""

    now_s: float
    pending_tasks: float
    running_tasks: float
    arrivals_total: float  # cumulative since t=0
    started_total: float
    completed_total: float
    arrivals_by_minute: Sequence[int]  # the trace up to and including the current minute
    # what the world assumes happened in the hour before t=0 (the first hour of the trace, which the initial
    # fleet is sized for): a policy with memory may warm up on it
    prehistory_arrivals_per_min: Sequence[int]
    machines: Sequence[MachineView]
    machines_by_id: Mapping[int, MachineView]
    events: Sequence[FleetEvent]  # since the previous decision
    task_s: float
    # cumulative, per GPU model: tasks started, and the machine-seconds they took (what completions would show)
    started_by_gpu_model: Mapping[str, float]
    busy_s_by_gpu_model: Mapping[str, float]
    disk_usd_per_h: float = 0.0  # what each instance's disk costs (vast's rows carry it as `storage_cost`)


@dataclass(frozen=True)
class Launch:
    count: int
    gpu_models: tuple[str, ...] = ()
    reason: str = ""
    max_price_usd_per_h: float | None = None
    # how many of `count` are interruptible, each bidding its offer's min_bid × (1 + bid_markup), never more
    # than the on-demand price: paused while another renter bids more, resumed when it is the highest again
    interruptible: int = 0
    bid_markup: float = 0.0
    # the provisioner's emergency launch (nobody serving queued tasks): offers ranked by startup against price
    urgent: bool = False


@dataclass(frozen=True)
class Remove:
    instance_id: int
    verb: Literal["drain", "stop", "destroy"] = "drain"
    reason: str = ""

    @property
    def parks(self) -> bool:
        """vast's stop keeps the machine, and a drain for parking ends in one (the decider stops it once drained)."""
        return self.verb == "stop" or self.reason == RemovalReason.PARK.value


@dataclass(frozen=True)
class Resume:
    """Start a parked machine again (vast's start): its disk and image are there, but its GPU may not be."""

    instance_id: int
    reason: str = ""


Action = Launch | Remove | Resume


def ceil_div(a: float, b: float) -> int:
    return max(0, math.ceil(a / b - 1e-9)) if b > 0 else 0
