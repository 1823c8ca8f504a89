"""Growth: lost capacity replaced, the forecast's or a surge's deficit launched, parked machines resumed first,
and part of the growth bid for when the market lets bids pay."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from services.decider.policy.base import LaunchPlan, ResumePlan
from services.decider.policy.bids import bid_choice
from services.decider.policy.config import PolicyConfig
from services.decider.policy.fleet_view import FleetView
from services.decider.policy.forecast import ceil_machines, rank_gpu_models
from services.decider.policy.mpc import MpcChoice
from services.decider.policy.parking import gpu_taken_per_h, resume_chance, standby_lacking
from services.decider.policy.sizing import Sizing
from shared.contract import FleetSnapshot, InstanceLine, LaunchPriority, LaunchReason, ParkOutcomes


@dataclass(frozen=True)
class Growth:
    launches: list[LaunchPlan]
    resumes: list[ResumePlan]
    rate_deficit: int  # machines the planning rate needs beyond the fleet (negative: a surplus)
    note: str = ""  # the bid choice, for the explanation


def grow(
    s: Sizing,
    fleet: FleetView,
    snapshot: FleetSnapshot,
    config: PolicyConfig,
    mpc: MpcChoice | None = None,
    now: datetime | None = None,
) -> Growth:
    """`mpc`: the launch count chosen by expected cost (mpc.py); without it, the forecast's target rules.
    `now`: when the parked machines' chances of resuming are read (default: the snapshot's time)."""
    rate_deficit = s.target - s.capacity if mpc is None else mpc.launches
    # lost capacity the forecast needs is replaced at once, a paused bid's too: it comes back only when the market
    # lets it, and waiting for that (or for the give-up) left a whole GPU model's bids unserved while the queue
    # grew (train seeds); if it does come back, the surplus is parked or given back like any other
    replacements = min(max(0, rate_deficit), lost_machines(s, fleet))
    if mpc is not None and not s.stalled_state:
        growth = max(0, mpc.launches - replacements)
    elif s.planned_from_rate:
        growth = max(0, rate_deficit) - replacements
    elif s.undrainable or s.nobody_serving:
        # a surge adds what its backlog will still need when machines land (the replacements land with them)
        growth = max(0, max(s.surge_machines, 1) - replacements)
    else:
        growth = 0
    when = now or snapshot.occurred_at
    replacements, growth, resumes = _resume_first(s, fleet, config, replacements, growth, when, snapshot.park_outcomes)
    standby = standby_short(s, fleet, config, replacements + growth + len(resumes))
    replacements = min(replacements, config.max_launches_per_decision)
    growth = min(growth, config.max_launches_per_decision - replacements)
    standby = min(standby, config.max_launches_per_decision - replacements - growth)
    launches: list[LaunchPlan] = []
    note = ""
    gpu_models = config.preferred_gpu_models or (
        rank_gpu_models(fleet.producing) if config.rank_fleet_gpu_models and (replacements or growth or standby) else ()
    )
    if replacements or growth:
        priority: LaunchPriority = "emergency" if s.healthy == 0 and s.pending > 0 else "normal"
        if replacements:
            launches.append(LaunchPlan(replacements, priority, LaunchReason.REPLACEMENT, gpu_models))
        if growth:
            reason = growth_reason(s, mpc is not None)
            plan, note = _with_bids(growth, priority, reason, gpu_models, s, fleet, snapshot, config)
            launches.append(plan)
    if standby and not s.stalled_state:
        launches.append(LaunchPlan(standby, "normal", LaunchReason.MINIMUM_FLEET, gpu_models))
        note += f"; standby pool short by {standby} (×{config.standby_fraction:g} of {max(s.keep, s.target)} needed)"
    return Growth(launches, resumes, rate_deficit, note)


def standby_short(s: Sizing, fleet: FleetView, config: PolicyConfig, launched: int) -> int:
    """Machines the standby pool lacks, topped up only in a run that launches nothing for the demand: its target
    less the machines parked, resuming or draining (to be parked) and the fleet's surplus beyond the demand.
    Parked machines count whole here, not at their chance of resuming: counted at that chance, and topped up in
    runs that launched for the demand too, the pool cost more (train seeds at ×1: 0.7144 of the best baseline
    against 0.7037)."""
    return 0 if launched > 0 else standby_lacking(max(s.keep, s.target), s.capacity, fleet, config)


def lost_machines(s: Sizing, fleet: FleetView) -> int:
    """Capacity the fleet had and lost: failed, stalled and outbid machines (what replacements stand in for)."""
    return len(fleet.failed) + len(s.stalled) + len(fleet.outbid)


def growth_reason(s: Sizing, mpc: bool = False) -> LaunchReason:
    if s.stalled_state:
        return LaunchReason.REPLACEMENT
    if s.sustained:
        return LaunchReason.SUSTAINED_DEMAND
    if s.foreseen:
        return LaunchReason.FORECAST
    if s.undrainable or s.nobody_serving or mpc:
        # the expected-cost choice launches on a surge's or a queue's evidence when it is neither sustained nor
        # foreseen
        return LaunchReason.BACKLOG
    return LaunchReason.MINIMUM_FLEET


def _resume_first(
    s: Sizing,
    fleet: FleetView,
    config: PolicyConfig,
    replacements: int,
    growth: int,
    now: datetime,
    park_outcomes: ParkOutcomes | None,
) -> tuple[int, int, list[ResumePlan]]:
    """Parked machines come back first: minutes to producing instead of hours, and no new startup to pay. They
    cover what the startup horizon needs before anything new is launched, but each is started only when the
    next `resume_s` needs it (resumed at a new machine's lead time, it would idle at full price for an hour).
    They cover as many launches as are expected to start again: a GPU parked overnight is often someone else's
    (the rate at which GPUs are taken is learned from how parks ended: parking.py).
    Returns the replacements and growth still to launch, and the resumes."""
    wanted = replacements + growth
    if not fleet.parked or wanted <= 0:
        return replacements, growth, []
    landing_soon = sum(1 for offset in s.offsets if offset <= config.resume_s)
    needed_soon = ceil_machines(s.rate_now / s.thr + s.pending / (s.thr * s.drain_h), config.round_slack_machines)
    resume_now = min(wanted, max(replacements, needed_soon - s.healthy - landing_soon))
    resumes = resumes_for(fleet, resume_now, LaunchReason.REPLACEMENT if replacements else None)
    covered = min(wanted, expected_resumable(fleet.parked, now, gpu_taken_per_h(park_outcomes, config)))
    from_growth = min(growth, covered)
    return replacements - (covered - from_growth), growth - from_growth, resumes


def expected_resumable(parked: list[InstanceLine], now: datetime, taken_per_h: float) -> int:
    """How many parked machines are expected to start again, each at exp(−rate × hours parked), rounded."""
    chances = (resume_chance((now - line.state_since).total_seconds(), taken_per_h) for line in parked)
    return math.floor(sum(chances) + 0.5)


def resumes_for(fleet: FleetView, wanted: int, replacement_reason: LaunchReason | None) -> list[ResumePlan]:
    """Parked machines to start again for `wanted` launches: the most recently parked first (the longer a machine
    waits, the likelier another renter holds its GPU)."""
    latest_first = sorted(fleet.parked, key=lambda line: line.state_since, reverse=True)
    reason = replacement_reason or LaunchReason.SUSTAINED_DEMAND
    return [ResumePlan(line.instance_id, reason) for line in latest_first[: max(0, wanted)]]


def _with_bids(
    growth: int,
    priority: LaunchPriority,
    reason: LaunchReason,
    gpu_models: tuple[str, ...],
    s: Sizing,
    fleet: FleetView,
    snapshot: FleetSnapshot,
    config: PolicyConfig,
) -> tuple[LaunchPlan, str]:
    """The growth launch, part of it as bids when the growth can wait for the market (a forecast or sustained
    demand, producers serving, no bid paused now) and the observed outbid rate lets a bid pay."""
    can_wait = priority == "normal" and reason in (LaunchReason.FORECAST, LaunchReason.SUSTAINED_DEMAND)
    bids = math.floor(growth * config.bid_share) if can_wait and s.healthy > 0 and not fleet.outbid else 0
    choice = bid_choice(snapshot.bid_outcomes, gpu_models, config) if bids else None
    note = f"; {choice.describe()}" if choice is not None else ""
    if choice is None or choice.markup is None:
        bids = 0
    markup = config.bid_markup if choice is None or choice.markup is None else choice.markup
    return LaunchPlan(growth, priority, reason, gpu_models, bids, markup), note
