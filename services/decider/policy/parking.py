"""The parked pool read from how parks ended lately (FleetSnapshot.park_outcomes, fleet's park book): how likely a
parked machine is to start again, how long one is worth keeping, and whether parking pays at all.

Azure Functions' hybrid-histogram keep-alive (Shahrad et al., USENIX ATC 2020) sizes how long an idle worker is
kept from the history of its idle gaps. Here the gap is how long a machine waited parked before a resume wanted
it, and the history decides whether a pool is kept at all: one whose machines are rarely resumed before their
disks have cost what a resume spares, or whose GPUs are usually gone when they are, is given back, and drained
machines are destroyed instead of parked.

Azure's keep-alive proper (the 99th percentile of the gaps + 10 %) was tried as the parked machine's limit and
measured worse: the history only holds the parks that ended, and a machine given back at a keep-alive learned
from the day's short gaps never shows the night's long one, so the limit stayed short and every morning launched
anew (train seeds 100-101 of diurnal, batch, quiet surges and mixture: 0.71 of the best baseline with the fixed
limits below, 0.82 with it). The limit stays `park_max_s` and the break-even.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.decider.policy.config import PolicyConfig
from services.decider.policy.fleet_view import FleetView
from shared.contract import InstanceLine, ParkOutcomes


def gpu_taken_per_h(outcomes: ParkOutcomes | None, config: PolicyConfig) -> float:
    """The rate at which another renter takes a parked machine's GPU: resumes that found it taken per hour that
    the resumed machines had waited, with the assumed prior counted as `parked_gpu_taken_prior_events` events
    (a handful of resumes moves it; one lucky resume does not make parking look safe)."""
    prior_events = config.parked_gpu_taken_prior_events
    prior_h = prior_events / config.parked_gpu_taken_per_h if config.parked_gpu_taken_per_h > 0 else math.inf
    if outcomes is None:
        return config.parked_gpu_taken_per_h
    exposed_h = sum(outcomes.resumed_after_h) + sum(outcomes.taken_after_h)
    return (len(outcomes.taken_after_h) + prior_events) / (exposed_h + prior_h)


def resume_chance(parked_s: float, taken_per_h: float) -> float:
    return math.exp(-taken_per_h * max(0.0, parked_s) / 3600)


@dataclass(frozen=True)
class ParkHistory:
    """The figures of the park book every parking verdict reads, summed once per decision (summed per machine,
    they were 6 % of the week's 1,400-machine replay)."""

    ended: int
    resumed_share: float  # of the parks that ended, those that ended in a working resume
    waited_h_per_park: float  # hours a park waited before it ended, on average

    @classmethod
    def of(cls, outcomes: ParkOutcomes | None) -> ParkHistory | None:
        if outcomes is None or outcomes.ended == 0:
            return None
        waited_h = sum(outcomes.resumed_after_h) + sum(outcomes.taken_after_h) + sum(outcomes.given_back_after_h)
        return cls(outcomes.ended, len(outcomes.resumed_after_h) / outcomes.ended, waited_h / outcomes.ended)


def parking_pays(line: InstanceLine, history: ParkHistory | None, config: PolicyConfig) -> bool:
    """Whether parking this machine is worth its disk, from how parks ended lately: the startup a resume spares,
    at the machine's price, times the share of parks that ended in a working resume, against the storage the
    parks cost while they waited. True while the history is short or the disk's price unknown."""
    if history is None or history.ended < config.park_history_min_ends or not line.storage_usd_per_h:
        return True
    saved_usd = history.resumed_share * config.default_startup_s / 3600 * line.price_usd_per_h
    stored_usd = history.waited_h_per_park * line.storage_usd_per_h
    return saved_usd > stored_usd


def parking_pays_for_fleet(lines: list[InstanceLine], history: ParkHistory | None, config: PolicyConfig) -> bool:
    """Whether parking pays for most of the fleet's machines (a decision parks the surplus, whichever it is)."""
    judged = [parking_pays(line, history, config) for line in lines if line.storage_usd_per_h]
    return not judged or sum(judged) * 2 >= len(judged)


def standby_lacking(needed: int, serving: int, fleet: FleetView, config: PolicyConfig) -> int:
    """Machines the standby pool lacks for a fleet whose demand needs `needed` machines: `standby_fraction` ×
    `needed` (none while parking is off), less what the pool holds (machines parked, resuming, or draining to be
    parked) and the surplus of `serving` (the machines counted against the demand) beyond `needed`."""
    target = math.ceil(config.standby_fraction * needed) if config.park else 0
    held = len(fleet.parked) + len(fleet.resuming) + len(fleet.draining)
    return max(0, target - held - max(0, serving - needed))


def describe(outcomes: ParkOutcomes | None) -> str:
    if outcomes is None:
        return "no park ended lately"
    return (
        f"of {outcomes.ended} parks ended in {outcomes.window_s / 86400:g} d, {len(outcomes.resumed_after_h)} resumed,"
        f" {len(outcomes.taken_after_h)} found the GPU taken, {len(outcomes.given_back_after_h)} given back unresumed"
    )


def park_limit_s(line: InstanceLine, history: ParkHistory | None, config: PolicyConfig) -> float:
    """How long a parked machine is kept: `park_max_s`; less when its disk costs more than a launch saves (past
    startup × price ÷ storage the wait has cost what it can save); none when parking does not pay."""
    if not parking_pays(line, history, config):
        return 0.0
    limit = config.park_max_s
    if line.storage_usd_per_h and line.price_usd_per_h > 0:
        limit = min(limit, config.default_startup_s * line.price_usd_per_h / line.storage_usd_per_h)
    return limit
