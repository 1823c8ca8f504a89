"""Which offers may be rented, and in what order: by expected cost per task.

expected $/task = effective price ÷ (expected tasks/h × reliability × history factor), where the effective price
is the hourly price plus the image pull (GB × the host's `inet_down_cost`) spread over a rent's hours, so a host
that prices its bandwidth high cannot hide it behind a low $/h; and expected tasks/h comes from
this machine's bench ratio, else the fleet's observed throughput for the GPU model, else the reference table;
and the history factor 1/(1 + penalty) discounts machines and hosts that failed us before.

An urgent launch weighs the startup too: over a horizon of H hours a machine bills its startup s and produces
for H, so its $/task is price × (s + H) ÷ (tasks/h × success × H); s is what this machine (or its host) took
before, else the typical startup plus the image pull over the offer's `inet_down`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from services.provisioner.host_history import HostHistory, StartupMeans
from services.provisioner.vast_models import VastOffer, pull_s
from shared import gpu_models
from shared.contract import InstanceLine, InstanceState


@dataclass(frozen=True)
class OfferConstraints:
    allowed_gpu_models: tuple[str, ...]
    max_price_usd_per_h: float
    min_reliability: float = 0.0
    verified_only: bool = True
    min_cuda: float = 0.0
    min_disk_gb: float = 0.0
    excluded_host_ids: frozenset[int] = frozenset()
    excluded_machine_ids: frozenset[int] = frozenset()
    # every machine alike: the decider sizes the fleet in machines at one machine's pace (None: any GPU count)
    gpus_per_machine: int | None = None

    @cached_property  # read for every offer of a search: built once
    def allowed_keys(self) -> frozenset[str]:
        return frozenset(gpu_models.normalised(m) for m in self.allowed_gpu_models)

    def narrowed_to(
        self,
        gpu_models_wanted: Iterable[str],
        max_price_usd_per_h: float | None,
        *,
        excluded_gpu_models: Iterable[str] = (),
        excluded_host_ids: Iterable[int] = (),
    ) -> OfferConstraints:
        """A command's own wishes, never wider than the configuration: the intersection of models, the lower cap,
        and the models and hosts it excludes (an operator's directives) on top of the configured exclusions."""
        wanted = {gpu_models.normalised(m) for m in gpu_models_wanted}
        unwanted = {gpu_models.normalised(m) for m in excluded_gpu_models}
        models = tuple(
            m
            for m in self.allowed_gpu_models
            if (not wanted or gpu_models.normalised(m) in wanted) and gpu_models.normalised(m) not in unwanted
        )
        cap = (
            self.max_price_usd_per_h
            if max_price_usd_per_h is None
            else min(self.max_price_usd_per_h, max_price_usd_per_h)
        )
        return OfferConstraints(
            allowed_gpu_models=models,
            max_price_usd_per_h=cap,
            min_reliability=self.min_reliability,
            verified_only=self.verified_only,
            min_cuda=self.min_cuda,
            min_disk_gb=self.min_disk_gb,
            excluded_host_ids=self.excluded_host_ids | frozenset(excluded_host_ids),
            excluded_machine_ids=self.excluded_machine_ids,
            gpus_per_machine=self.gpus_per_machine,
        )


@dataclass(frozen=True)
class ThroughputKnowledge:
    """Tasks/h per GPU observed by this fleet, by GPU model (from the demand signal's completions, made per GPU by
    `per_gpu_paces`)."""

    observed_tasks_per_h_by_model: Mapping[str, float] = field(default_factory=dict)

    def per_gpu_tasks_per_h(self, gpu_name: str) -> float | None:
        model = gpu_models.find(gpu_name)
        for name, rate in self.observed_tasks_per_h_by_model.items():
            if rate > 0 and gpu_models.normalised(name) == gpu_models.normalised(gpu_name):
                return rate
        return model.reference_tasks_per_h if model else None


def gpus_per_producer(lines: Iterable[InstanceLine]) -> dict[str, float]:
    """Normalised GPU model → the mean GPU count of this fleet's producing machines of that model, else of all its
    machines of that model (a night's fleet, all parked, still says what the day's producers were)."""
    producing: dict[str, list[int]] = {}
    others: dict[str, list[int]] = {}
    for line in lines:
        if line.gpu_model:
            into = producing if line.state is InstanceState.PRODUCING else others
            into.setdefault(gpu_models.normalised(line.gpu_model), []).append(line.num_gpus)
    return {model: sum(gpus) / len(gpus) for model, gpus in {**others, **producing}.items()}


def per_gpu_paces(per_producer: Mapping[str, float], producer_gpus: Mapping[str, float]) -> dict[str, float]:
    """demand's paces (tasks/h of one producer, by GPU model) made per GPU, which is what ranking multiplies by an
    offer's GPU count.

    demand counts a producer per machine wherever the job system's events name the instance, and those are the
    machines fleet sees producing; a 4-GPU machine measured at 480 tasks/h read as 480 per GPU made every 4-GPU
    offer of that model look four times faster than a 1-GPU offer of another model (and than its own model's
    benchmarked machines). A model none of fleet's machines runs keeps demand's figure as it is (its producers
    are then workers that never name their machine, whose GPUs nobody knows).
    """
    paces: dict[str, float] = {}
    for model, pace in per_producer.items():
        if pace > 0:
            gpus = producer_gpus.get(gpu_models.normalised(model))
            paces[model] = pace / gpus if gpus else pace
    return paces


# an urgent launch is ranked over about one startup's worth of production (a judgement, not fitted): long enough
# for price to matter, short enough that a host known to start in 30 min beats a cheaper one that takes 2 h
URGENT_HORIZON_H = 2.0
# a link vast does not list is taken as a slow one, so an unknown host never looks faster than a known one
UNKNOWN_LINK_MBPS = 100.0
# a rent's one-off pull is spread over this many of its hours in the ranking: a machine is kept for hours (the
# 6 h demand window spans a startup and a stretch of production), and a shorter span would rank a cheap-link
# host above a cheaper machine for cents
PULL_AMORTISED_OVER_H = 6.0


@dataclass(frozen=True)
class StartupModel:
    """Create → running for an offer: what it (or its host) took before, else the typical startup and its pull."""

    image_gb: float = 10.0
    typical_startup_s: float = 5400.0  # besides the image pull: container start, weights, warm-up (vast: 1-2 h)

    def predicted_s(self, offer: VastOffer, known: StartupMeans) -> float:
        observed = known.of(offer.host_id, offer.machine_id)
        if observed is not None:
            return observed
        link = offer.inet_down if offer.inet_down is not None and offer.inet_down > 0 else UNKNOWN_LINK_MBPS
        return self.typical_startup_s + pull_s(self.image_gb, link)

    def pull_cost_usd(self, offer: VastOffer) -> float:
        """The image pull at the host's $/GB: billed once per rent, in no hourly price (none listed: none)."""
        return self.image_gb * max(0.0, offer.inet_down_cost or 0.0)


@dataclass(frozen=True)
class RankedOffer:
    offer: VastOffer
    expected_tasks_per_h: float
    success_factor: float  # reliability × history factor, in (0, 1]
    expected_usd_per_task: float
    predicted_startup_s: float = 0.0
    pull_cost_usd: float = 0.0  # one-off, at rent: the image pull over the host's priced bandwidth

    @property
    def price_usd_per_h(self) -> float:
        return self.offer.dph_total


def search_query(constraints: OfferConstraints, *, limit: int, disk_gb: float) -> dict[str, Any]:
    """The `POST /api/v0/bundles/` body for these constraints (vast's CLI defaults included: rentable, not rented)."""
    query: dict[str, Any] = {
        "gpu_name": {"in": list(constraints.allowed_gpu_models)},
        "dph_total": {"lte": constraints.max_price_usd_per_h},
        "reliability2": {"gte": constraints.min_reliability},
        "cuda_max_good": {"gte": constraints.min_cuda},
        "disk_space": {"gte": max(constraints.min_disk_gb, disk_gb)},
        "rentable": {"eq": True},
        "rented": {"eq": False},
        "external": {"eq": False},
        "order": [["dph_total", "asc"]],
        "type": "on-demand",
        "limit": limit,
        "allocated_storage": disk_gb,
    }
    if constraints.verified_only:
        query["verified"] = {"eq": True}
    if constraints.gpus_per_machine is not None:
        query["num_gpus"] = {"eq": constraints.gpus_per_machine}
    if constraints.excluded_host_ids:
        query["host_id"] = {"notin": sorted(constraints.excluded_host_ids)}
    if constraints.excluded_machine_ids:
        query["machine_id"] = {"notin": sorted(constraints.excluded_machine_ids)}
    return query


def _not_excluded(listed_id: int | None, excluded_ids: frozenset[int]) -> bool:
    """While some ids are excluded, a row that names none cannot be checked against them: it may be the very host
    an operator excluded, so it is not rented (with no exclusion in force, a missing id excludes nothing)."""
    if not excluded_ids:
        return True
    return listed_id is not None and listed_id not in excluded_ids


def acceptable(offer: VastOffer, constraints: OfferConstraints) -> bool:
    """Checked again here: a search filter vast ignored must not let a wrong machine through."""
    return (
        gpu_models.normalised(offer.gpu_name) in constraints.allowed_keys
        and offer.dph_total <= constraints.max_price_usd_per_h
        and offer.reliability_score >= constraints.min_reliability
        and (not constraints.verified_only or offer.verified is True)
        and (offer.cuda_max_good or 0.0) >= constraints.min_cuda
        and (offer.disk_space or 0.0) >= constraints.min_disk_gb
        and _not_excluded(offer.host_id, constraints.excluded_host_ids)
        and _not_excluded(offer.machine_id, constraints.excluded_machine_ids)
        and (constraints.gpus_per_machine is None or offer.num_gpus == constraints.gpus_per_machine)
    )


def pull_past_meaning(offer: VastOffer, startup: StartupModel) -> bool:
    """The image pull at this host's bandwidth price is no finite number of dollars (a row at 1e308 $/GB): such a
    rent can be neither budgeted (one such offer refused a whole launch on the day's cap) nor published (JSON has no
    inf: the offer list carrying one failed validation at the decider), so the offer is not acceptable."""
    return not math.isfinite(startup.pull_cost_usd(offer))


def distinct_offers(offers: Iterable[VastOffer]) -> list[VastOffer]:
    """Each offer id once, as first listed: an id is one machine's ask, so a row listed twice (a page that moved
    under the search) was ranked twice and planned as two rents of one machine."""
    seen: set[int] = set()
    distinct = []
    for offer in offers:
        if offer.id not in seen:
            seen.add(offer.id)
            distinct.append(offer)
    return distinct


def rank(
    offers: Iterable[VastOffer],
    constraints: OfferConstraints,
    knowledge: ThroughputKnowledge,
    history: HostHistory,
    now: datetime,
    *,
    urgent_horizon_h: float | None = None,
    startup: StartupModel = StartupModel(),
    fills_last_slots: bool = False,
) -> list[RankedOffer]:
    """Acceptable offers, cheapest expected cost per task first (over `urgent_horizon_h` with the startup paid,
    when given). Offers of unknown throughput are left out.

    `fills_last_slots`: this launch takes the instance cap's last slots, so a slot, not a dollar, is what is short:
    the most expected throughput per machine first (within the price cap the constraints already hold), the cost
    per task breaking ties. A flash crowd under the cap otherwise filled every slot with slow, cheap machines at
    half the pace per slot of a rule that rented faster ones, and its queue drained hours later."""
    ranked = []
    penalties = history.penalties(now)
    startups = history.startup_means()
    # a market lists few GPU models and many machines: each model's pace looked up once per search
    model_pace: dict[str, float | None] = {}
    for offer in distinct_offers(offers):
        if not acceptable(offer, constraints):
            continue
        pull_usd = startup.pull_cost_usd(offer)
        if not math.isfinite(pull_usd):
            continue  # `pull_past_meaning`: counted and logged where the search is made
        per_gpu = expected_per_gpu_tasks_per_h(offer, knowledge, history, now, model_pace)
        if per_gpu is None:
            continue
        tasks_per_h = per_gpu * offer.num_gpus
        history_factor = 1.0 / (1.0 + penalties.of(offer.host_id, offer.machine_id))
        success = max(offer.reliability_score, 1e-3) * history_factor
        effective_usd_per_h = offer.dph_total + pull_usd / PULL_AMORTISED_OVER_H
        usd_per_task = effective_usd_per_h / (tasks_per_h * success)
        startup_s = startup.predicted_s(offer, startups)
        if urgent_horizon_h is not None:
            usd_per_task *= (startup_s / 3600 + urgent_horizon_h) / urgent_horizon_h
        if not math.isfinite(usd_per_task):
            continue  # a ranking key past any meaning orders nothing, and no offer list may carry it
        ranked.append(
            RankedOffer(
                offer=offer,
                expected_tasks_per_h=tasks_per_h,
                success_factor=success,
                expected_usd_per_task=usd_per_task,
                predicted_startup_s=startup_s,
                pull_cost_usd=pull_usd,
            )
        )
    if fills_last_slots:
        ranked.sort(key=lambda r: (-r.expected_tasks_per_h * r.success_factor, r.expected_usd_per_task, r.offer.id))
    else:
        ranked.sort(key=lambda r: (r.expected_usd_per_task, r.offer.dph_total, r.offer.id))
    return ranked


# A benchmark is the host's own report: it may rank its machine down freely, but up by this much at most, so a
# made-up fast run cannot make a machine look nearly free per task (1.1: a healthy card's spread over its model).
# What a machine produced for us is believed as measured: it is fleet's count of completions, a resent one counted
# once, and a count far beyond its model's other machines is dropped before it is recorded (production_ratios).
BENCH_RATIO_AT_MOST = 1.1


def expected_per_gpu_tasks_per_h(
    offer: VastOffer,
    knowledge: ThroughputKnowledge,
    history: HostHistory,
    now: datetime,
    model_pace: dict[str, float | None] | None = None,
) -> float | None:
    """This machine's own bench ratio times its model's reference, else the fleet's observation of the model
    (remembered in `model_pace`, by GPU name, when given: the same for every offer of a search).

    Never both: the ratio is measured against the reference, so it already holds whatever makes the model faster or
    slower than its reference, which is what the fleet's observation holds too.
    """
    measure = history.fresh_measure(offer.machine_id, now)
    model = gpu_models.find(offer.gpu_name)
    if measure is not None and model is not None:
        ratio = measure.ratio_to_reference
        return model.reference_tasks_per_h * (min(ratio, BENCH_RATIO_AT_MOST) if measure.source == "bench" else ratio)
    if model_pace is None:
        return knowledge.per_gpu_tasks_per_h(offer.gpu_name)
    if offer.gpu_name not in model_pace:
        model_pace[offer.gpu_name] = knowledge.per_gpu_tasks_per_h(offer.gpu_name)
    return model_pace[offer.gpu_name]
