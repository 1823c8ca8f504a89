"""The predictive policy: size the producing fleet for demand over the hours a machine needs to arrive.

Target = machines for the forecast arrival rate over [now + startup, + planning window], plus those needed to
drain, within a target time, the backlog the current and arriving fleet will have left when new machines land.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from services.decider.policy.base import LaunchPlan, PolicyFigures, Recommendation, RemovalPlan, ResumePlan
from services.decider.policy.forecast import (
    ARRIVING_STATES,
    arrival_forecast_per_h,
    backlog_after,
    base_arrival_rate_per_h,
    ceil_machines,
    falling,
    keep_arrival_rate_per_h,
    learned_startup_s,
    machines_needed_for_backlog,
    rank_gpu_models,
    ready_offsets_s,
    rising_slope_per_h2,
    seasonal_forecast,
    throughput_per_machine,
)
from shared.contract import (
    DemandSignal,
    DemandState,
    FailureReason,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    LaunchPriority,
    LaunchReason,
    ParkReason,
    RemovalReason,
)
from shared.contract.fleet import BidOutcome

# vast bills GPU time from `running`: before that an instance costs its disk only
BILLED_ARRIVING_STATES = frozenset({InstanceState.RUNNING, InstanceState.REGISTERED, InstanceState.BENCHMARKED})

FAILURE_TO_REMOVAL = {
    FailureReason.STUCK_LOADING: RemovalReason.STUCK_LOADING,
    FailureReason.NEVER_REGISTERED: RemovalReason.NEVER_REGISTERED,
    FailureReason.BENCH_FAILED: RemovalReason.BENCH_FAILED,
    FailureReason.DEAD: RemovalReason.DEAD,
    FailureReason.VAST_ERROR: RemovalReason.FAILED,
    FailureReason.LOST: RemovalReason.FAILED,
}


@dataclass(frozen=True)
class PolicyConfig:
    """Every threshold of the predictive policy, with where its default comes from."""

    # DESIGN.md: a rented machine takes 1–2 h from launch to producing; learned from the fleet once it has
    # `startup_min_samples` producing machines, bounded to [startup_min_s, startup_max_s]
    default_startup_s: float = 5400.0
    startup_min_samples: int = 3
    startup_min_s: float = 600.0
    startup_max_s: float = 6 * 3600.0
    # plan for demand over this window after the startup horizon; a ramp is extrapolated to its middle. Two
    # hours, not one: a morning ramp steepens as it goes and the one-hour slope lags it (week trace: delay
    # 11.5k → 5.8k USD, cost +1%; diurnal 333 → 323 USD)
    planning_window_s: float = 7200.0
    # DESIGN.md: one machine, pipelined, finishes a task every ~30 s; used until demand or fleet measure it
    default_throughput_tasks_per_h: float = 120.0
    # the backlog left when new machines land must be drained within this time. Waiting costs far more than
    # machines (0.10 $/task-h beyond the grace against ~0.003 $ of machine time per task), so sooner pays until
    # machines land after the queue is gone: 45 min measured better (week 37.1k → 35.6k $, diurnal 317 → 299 $;
    # 30 min: week 34.3k $ but bursty 211 → 233 $); kept at one hour while the decider's service tests pin its
    # launch counts
    backlog_drain_target_s: float = 3600.0
    # arrivals above capacity for this long are sustained demand, not a burst (demand's above_capacity_for_s)
    sustained_for_s: float = 900.0
    # a backlog below this many machine-hours is not worth a machine that arrives in 1.5 h (8 tasks ≈ 4 min)
    backlog_tolerance_machine_h: float = 0.25
    # arrivals above capacity for less than `sustained_for_s` are a surge: expected to last as long again as they
    # have lasted (no longer evidence, no longer forecast), at least this long, then to fall back to what the
    # producers served before. 22 tasks within a minute on a cold start once launched 10 GPUs because one
    # minute's rate was planned for 3.5 hours; a minute's evidence now buys what clears a minute's arrivals
    surge_min_s: float = 60.0
    # the backlog a surge leaves when machines land is cleared within this time. Waiting B tasks cleared by n
    # machines costs ≈ B²/(2 n μ) task-hours at the delay price d, each machine its startup s at price p: the
    # sum is least at n = B √(d / (2 μ s p)), a drain time of √(2 s p / (μ d)) ≈ 0.35 h at μ = 120/h,
    # s = 1.5 h, p = 0.5 $/h and d = 0.10 $/task-h (sim/world/README.md's objective)
    surge_drain_target_s: float = 1200.0
    # whether a machine still loading is billed: the world and the vast.ai simulator bill from creation, so a
    # loading machine nobody needs any more costs its price every hour it stays (vast itself bills GPU time
    # from running: with False only a machine that is running but not yet producing is given back)
    loading_billed: bool = True
    # machines on the way are given back only beyond this multiple of the kept fleet: recurring bursts come back
    # before a machine given back could be launched again (fitted: see sim/world/fitted.py)
    arriving_keep_factor: float = 2.0
    # the arrival slope is read over this window (demand publishes 15 min, 1 h, 6 h): an hour smooths minute
    # noise and still follows a morning ramp
    trend_window_s: float = 3600.0
    # a slope counts only this many Poisson standard errors from zero (≈ 85/h² at 600 tasks/h), so bursts
    # and noise are not extrapolated
    trend_min_z: float = 3.0
    # a short window this far above the trend window's mean is a step (spike, burst), not a ramp: no slope
    # (a diurnal morning puts it ≈ 15% above; 0.3 let the bursty trace's steps through: 258 → 208 $ at 0.2)
    trend_max_jump_fraction: float = 0.2
    # a rising trend is extrapolated to the middle of the horizon, never beyond this multiple of the rate
    trend_cap_factor: float = 2.0
    # demand's echo of a day ago is scaled by today's last hour ÷ that day's; outside these bounds today is not
    # that day (a queue that stopped, a weekend after a weekday at ≈ 0.4) and the echo is not used
    season_ratio_bounds: tuple[float, float] = (0.5, 2.0)
    # a need within this fraction of a machine does not buy another (no launch for 2.05 machines' worth)
    round_slack_machines: float = 0.1
    # scale-down: a machine idle this long, and only when capacity exceeds the keep target by the margin
    idle_before_scale_down_s: float = 1800.0
    # busy producers are drained too when the queue holds less than this much of the producers' work and those
    # left serve the kept rate with this headroom (0.2 gave diurnal 323 → 310 $ and decline 55 → 50 $, but the
    # bursty trace's next burst then waited: 211 → 275 $; 0.5 is neutral there and still trims the spike's)
    empty_queue_s: float = 300.0
    busy_drain_headroom_fraction: float = 0.5
    scale_down_margin_fraction: float = 0.2
    # while arrivals fall significantly the decline is not a trough: keep only what the last hour needs, with
    # this margin (20% left ~70 idle machine-hours on a day-long decline)
    falling_margin_fraction: float = 0.05
    min_machines: int = 0
    # a producer without a finished task this long while tasks wait is stalled (replaced, never removed)
    stalled_after_s: float = 900.0
    # a draining machine is destroyed once it finished its last task this long ago, or after max_drain_s
    drain_grace_s: float = 600.0
    max_drain_s: float = 3600.0
    # one launch command at most (the contract caps a command's count at 100): a flash crowd or a batch got its
    # machines 20 a run, several runs late (fitted: see sim/world/fitted.py)
    max_launches_per_decision: int = 100
    # GPU models to ask for, preferred first; empty: any allowed model, the provisioner ranks offers by expected
    # dollars per task. The provisioner takes the list as a filter, so asking only for models already in the
    # fleet refused every launch once their offers ran out (the week trace: 22,674 refused, 700 of 1,000 peak)
    preferred_gpu_models: tuple[str, ...] = ()
    # ask for the fleet's measured cheapest models (per dollar per task) when no preference is configured
    rank_fleet_gpu_models: bool = False
    # parking (vast's stop keeps the disk and its image): a producer the demand no longer needs is stopped instead
    # of drained and destroyed, and parked machines are resumed before anything new is launched. Its disk costs
    # ~0.01 $/h (50 GB at vast's 0.15 $/GB-month) against the 1-2 h startup a new machine bills at its full price,
    # so a parked machine pays if it is wanted again within days; after `park_max_s` it is given back (the chance
    # that its GPU is still free fades while it waits). Off until measured on the world's families.
    park: bool = False
    park_max_s: float = 24 * 3600.0
    # a resumed machine produces again after vast's restart (minutes) and its worker's registration
    resume_s: float = 900.0
    # interruptible machines (vast's bids, often half the on-demand price, paused while outbid): this share of the
    # machines launched for demand that can wait (the forecast, a sustained rise; never replacements, never an
    # emergency), each bidding min_bid × (1 + bid_markup); the guardrails keep the last producers on-demand.
    # Off until measured on the world's families.
    bid_share: float = 0.0
    bid_markup: float = 0.1
    # an interruptible machine paused by a higher bid this long is given back (its capacity is replaced like any
    # lost machine's); while any is paused, new launches are on-demand: the market is outbidding us now
    outbid_give_up_s: float = 1800.0
    # Bids follow how the market treated ours over fleet's window (FleetSnapshot.bid_outcomes): up to this many
    # outbid pauses per interruptible machine-hour the base `bid_markup` stands; each doubling of the rate above
    # it raises the markup by `bid_markup_step`. A step costs 0.1 × min_bid (≈ 0.05 of the on-demand price) every
    # hour; a pause costs about a replacement's startup at full price (0.5-1 of it), so a step pays once it
    # spares a pause in 10-20 machine-hours (see sim/world/fitted.py for what the world measured)
    bid_outbid_target_per_h: float = 0.1
    bid_markup_step: float = 0.1
    # no bid above min_bid × (1 + this): at min_bid ≈ half the on-demand price that is 0.7 of it, saving 0.3 of
    # it an hour, less than a bid paused more often than every 1.25 h costs: past 0.1 × 2³ = 0.8 pauses per
    # machine-hour, the share meant for bids launches on-demand
    bid_markup_cap: float = 0.4
    # below this many interruptible machine-hours in the window, pauses say little: the base markup holds
    bid_min_observed_machine_h: float = 4.0


DEFAULT_CONFIG = PolicyConfig()


@dataclass(frozen=True)
class BidChoice:
    """The markup a launch's bids get, from the outbid rate observed for its GPU models (None: too few hours
    observed to say). `markup` None: the market pauses our bids too often for any bid to pay."""

    markup: float | None
    outbid_pauses: int = 0
    interruptible_machine_h: float = 0.0
    outbid_rate_per_h: float | None = None

    def describe(self) -> str:
        observed = (
            f"{self.outbid_pauses} outbid pauses in {self.interruptible_machine_h:.0f} interruptible machine-h"
            + (f" ({self.outbid_rate_per_h:.3f}/h)" if self.outbid_rate_per_h is not None else ", too few to judge")
        )
        if self.markup is None:
            return f"no bids: {observed}"
        return f"bids at min_bid × {1 + self.markup:.2f}: {observed}"


def bid_choice(outcomes: list[BidOutcome], gpu_models: tuple[str, ...], config: PolicyConfig) -> BidChoice:
    """The markup for bids on these GPU models (any model when none is named), from fleet's window.

    The base markup while the rate is at or below the target; one step more for each doubling above it; no bid
    at all where that passes the cap."""
    relevant = [o for o in outcomes if o.gpu_model in gpu_models] if gpu_models else outcomes
    machine_h = sum(o.interruptible_machine_h for o in relevant)
    pauses = sum(o.outbid_pauses for o in relevant)
    if machine_h < config.bid_min_observed_machine_h:
        return BidChoice(config.bid_markup, pauses, machine_h)
    rate_per_h = pauses / machine_h
    steps = 0
    if rate_per_h > config.bid_outbid_target_per_h:
        steps = math.ceil(math.log2(rate_per_h / config.bid_outbid_target_per_h))
    markup = config.bid_markup + steps * config.bid_markup_step
    if markup > config.bid_markup_cap + 1e-9:
        return BidChoice(None, pauses, machine_h, rate_per_h)
    return BidChoice(round(markup, 6), pauses, machine_h, rate_per_h)


@dataclass
class _Fleet:
    producing: list[InstanceLine] = field(default_factory=list)
    arriving: list[InstanceLine] = field(default_factory=list)
    draining: list[InstanceLine] = field(default_factory=list)
    failed: list[InstanceLine] = field(default_factory=list)
    parked: list[InstanceLine] = field(default_factory=list)  # by our stop, ours to resume (not outbid ones)
    outbid: list[InstanceLine] = field(default_factory=list)  # interruptible, paused by a higher bid
    resuming: list[InstanceLine] = field(default_factory=list)


def _split(snapshot: FleetSnapshot) -> _Fleet:
    fleet = _Fleet()
    for line in snapshot.instances:
        if line.state is InstanceState.PRODUCING:
            fleet.producing.append(line)
        elif line.state in ARRIVING_STATES:
            fleet.arriving.append(line)
        elif line.state is InstanceState.DRAINING:
            fleet.draining.append(line)
        elif line.state is InstanceState.FAILED:
            fleet.failed.append(line)
        elif line.state is InstanceState.PARKED and line.park_reason is ParkReason.STOPPED:
            fleet.parked.append(line)
        elif line.state is InstanceState.PARKED and line.park_reason is ParkReason.OUTBID:
            fleet.outbid.append(line)
        elif line.state is InstanceState.RESUMING:
            fleet.resuming.append(line)
    return fleet


def _silent_for_s(line: InstanceLine, now: datetime) -> float:
    since = line.last_task_at or line.state_since
    return (now - since).total_seconds()


def stalled_producers(producing: list[InstanceLine], now: datetime, config: PolicyConfig) -> list[InstanceLine]:
    """Producers silent too long; when demand says workers stalled but none looks silent, all are suspect."""
    silent = [line for line in producing if _silent_for_s(line, now) >= config.stalled_after_s]
    return silent or list(producing)


def recommend(
    signal: DemandSignal,
    snapshot: FleetSnapshot,
    now: datetime,
    config: PolicyConfig = DEFAULT_CONFIG,
    *,
    unobserved_launches: int = 0,
) -> Recommendation:
    """Launches, removals or hold, with a one-line explanation citing the numbers.

    `unobserved_launches`: machines launched recently that the snapshot does not show yet; counted as arriving.
    """
    fleet = _split(snapshot)
    thr = throughput_per_machine(signal, fleet.producing, config.default_throughput_tasks_per_h)
    startup_s = learned_startup_s(
        fleet.producing,
        default_s=config.default_startup_s,
        min_samples=config.startup_min_samples,
        min_s=config.startup_min_s,
        max_s=config.startup_max_s,
    )
    stalled_state = signal.state is DemandState.WORKERS_STALLED
    stalled = stalled_producers(fleet.producing, now, config) if stalled_state else []
    healthy = len(fleet.producing) - len(stalled)
    pending = signal.pending_tasks
    slope_per_h2 = rising_slope_per_h2(
        signal, config.trend_window_s, config.trend_min_z, config.trend_max_jump_fraction
    )
    declining = falling(signal, config.trend_window_s, config.trend_min_z)
    # arrivals until new machines land: the mean of the base rate and the forecast at the startup horizon
    rate_now = (
        base_arrival_rate_per_h(signal, slope_per_h2)
        + arrival_forecast_per_h(signal, startup_s, config.trend_cap_factor, slope_per_h2=slope_per_h2)
    ) / 2
    season = seasonal_forecast(
        signal,
        now,
        startup_s=startup_s,
        planning_window_s=config.planning_window_s,
        ratio_bounds=config.season_ratio_bounds,
    )
    if season is not None:
        # a day ago's next hours know where a ramp flattens and when the evening falls, which no slope does:
        # they replace the extrapolation and the look-back (week trace: 1.55 → 1.34 of the bound), while
        # today's sustained rate still rules when today runs above yesterday's shape
        rate_up = max(season.planning_rate_per_h, signal.sustained_arrival_rate_per_h)
        keep_rate = max(season.keep_rate_per_h, signal.sustained_arrival_rate_per_h)
    else:
        horizon_mid_s = startup_s + config.planning_window_s / 2
        rate_up = arrival_forecast_per_h(signal, horizon_mid_s, config.trend_cap_factor, slope_per_h2=slope_per_h2)
        keep_rate = keep_arrival_rate_per_h(signal, startup_s, declining, config.trend_window_s)
    rate_keep = max(rate_up, keep_rate)
    resuming_offsets = [max(0.0, config.resume_s - (now - line.state_since).total_seconds()) for line in fleet.resuming]
    offsets = (
        sorted(ready_offsets_s(fleet.arriving, now, startup_s) + resuming_offsets) + [startup_s] * unobserved_launches
    )
    arriving = len(fleet.arriving) + len(fleet.resuming) + unobserved_launches
    capacity = healthy + arriving
    drain_h = config.backlog_drain_target_s / 3600

    # a surge (arrivals above capacity, not yet sustained) is planned from its own evidence, not from its rate:
    # it lasts as long again as it has lasted, then arrivals fall back to what the producers served before
    surge_s = max(signal.above_capacity_for_s, config.surge_min_s)

    def backlog_at(duration_s: float, *, surge: bool = False) -> float:
        return backlog_after(
            duration_s,
            backlog_tasks=pending,
            arrival_per_h=min(rate_now, healthy * thr) if surge else rate_now,
            surge_per_h=rate_now if surge else None,
            surge_s=surge_s,
            machines_now=healthy,
            ready_offsets=offsets,
            throughput_per_h=thr,
        )

    backlog_at_horizon = backlog_at(startup_s)
    drain_machines = backlog_at_horizon / (thr * drain_h)
    surge_left = backlog_at(startup_s + config.surge_drain_target_s, surge=True)
    surge_machines = ceil_machines(surge_left / (thr * config.surge_drain_target_s / 3600), config.round_slack_machines)
    demand_present = pending > 0 or rate_now > 0
    target = max(ceil_machines(rate_up / thr + drain_machines, config.round_slack_machines), config.min_machines)
    keep = max(ceil_machines(rate_keep / thr + drain_machines, config.round_slack_machines), config.min_machines)
    if demand_present:
        target, keep = max(target, 1), max(keep, 1)

    sustained = signal.above_capacity_for_s >= config.sustained_for_s or (slope_per_h2 > 0 and target > capacity)
    # yesterday's shape is no burst: when it says the demand is coming, machines leave in time to meet it
    foreseen = season is not None and season.planning_rate_per_h > signal.sustained_arrival_rate_per_h
    nobody_serving = capacity == 0 and pending > 0
    # what the fleet and the machines on the way cannot clear before a new machine could help: launch for that
    # now; a burst they clear launches nothing, however high its rate looked for a minute
    undrainable = surge_left > config.backlog_tolerance_machine_h * thr
    planned_from_rate = sustained or foreseen or stalled_state or capacity < config.min_machines
    figures = PolicyFigures(
        throughput_per_machine_tasks_per_h=round(thr, 3),
        startup_s=round(startup_s, 1),
        arrival_forecast_per_h=round(rate_up, 3),
        keep_arrival_rate_per_h=round(rate_keep, 3),
        pending_tasks=pending,
        backlog_at_horizon_tasks=round(backlog_at_horizon, 1),
        target_machines=target,
        keep_machines=keep,
        producing=len(fleet.producing),
        stalled_producers=len(stalled),
        arriving=arriving,
        unobserved_launches=unobserved_launches,
        sustained=sustained,
        undrainable_backlog=undrainable,
        season_level_ratio=None if season is None else round(season.level_ratio, 3),
    )
    numbers = (
        f"need {target} machines for {rate_up:.0f} tasks/h"
        + (f" (a day ago's shape ×{season.level_ratio:.2f})" if season is not None else "")
        + f" at {thr:.0f}/h each over {startup_s / 3600:.1f}h startup"
        f" + {config.planning_window_s / 3600:.1f}h window"
        + (f" (+{backlog_at_horizon:.0f} tasks backlog then, {drain_machines:.1f} machines to drain in {drain_h:.1f}h)"
           if backlog_at_horizon >= 1 else "")
        + f"; have {healthy} producing + {arriving} arriving, {pending} pending"
        + (f"; a surge {surge_s / 60:.0f} min old, expected to last as long again, leaves {surge_left:.0f} tasks"
           f" after {(startup_s + config.surge_drain_target_s) / 3600:.1f}h: {surge_machines} machines clear them"
           if not planned_from_rate and (undrainable or nobody_serving) else "")
    )  # fmt: skip

    removals = _failed_and_drained(fleet, now, config, stalled_state)
    # parked too long: its GPU is likely someone else's by now, and the disk is billed for nothing
    expired = [line for line in fleet.parked if (now - line.state_since).total_seconds() >= config.park_max_s]
    removals += [RemovalPlan("destroy", line.instance_id, RemovalReason.IDLE) for line in expired]
    expired_ids = {line.instance_id for line in expired}
    fleet.parked = [line for line in fleet.parked if line.instance_id not in expired_ids]
    removals += [RemovalPlan("destroy", line.instance_id, RemovalReason.OUTBID) for line in fleet.outbid
                 if (now - line.state_since).total_seconds() >= config.outbid_give_up_s]  # fmt: skip
    launches: list[LaunchPlan] = []
    rate_deficit = target - capacity
    # lost capacity the forecast needs is replaced at once, a paused bid's too: it comes back only when the market
    # lets it, and waiting for that (or for the give-up) left a whole GPU model's bids unserved while the queue
    # grew (train seeds); if it does come back, the surplus is parked or given back like any other
    replacements = min(max(0, rate_deficit), len(fleet.failed) + len(stalled) + len(fleet.outbid))
    if planned_from_rate:
        growth = max(0, rate_deficit) - replacements
    elif undrainable or nobody_serving:
        # a surge adds what its backlog will still need when machines land (the replacements land with them)
        growth = max(0, max(surge_machines, 1) - replacements)
    else:
        growth = 0
    # parked machines come back first: minutes to producing instead of hours, and no new startup to pay. They
    # cover what the startup horizon needs before anything new is launched, but each is started only when the
    # next `resume_s` needs it (resumed at a new machine's lead time, it would idle at full price for an hour)
    wanted = replacements + growth
    if fleet.parked and wanted > 0:
        landing_soon = sum(1 for offset in offsets if offset <= config.resume_s)
        needed_soon = ceil_machines(rate_now / thr + pending / (thr * drain_h), config.round_slack_machines)
        resume_now = min(wanted, max(replacements, needed_soon - healthy - landing_soon))
        resumes = _resumes(fleet, resume_now, LaunchReason.REPLACEMENT if replacements else None)
        covered = min(wanted, len(fleet.parked))
        from_growth = min(growth, covered)
        growth -= from_growth
        replacements -= covered - from_growth
    else:
        resumes = []
    replacements = min(replacements, config.max_launches_per_decision)
    growth = min(growth, config.max_launches_per_decision - replacements)
    if replacements or growth:
        priority: LaunchPriority = "emergency" if healthy == 0 and pending > 0 else "normal"
        gpu_models = config.preferred_gpu_models or (
            rank_gpu_models(fleet.producing) if config.rank_fleet_gpu_models else ()
        )
        if replacements:
            launches.append(LaunchPlan(replacements, priority, LaunchReason.REPLACEMENT, gpu_models))
        if growth:
            if stalled_state:
                reason = LaunchReason.REPLACEMENT
            elif sustained:
                reason = LaunchReason.SUSTAINED_DEMAND
            elif foreseen:
                reason = LaunchReason.FORECAST
            elif undrainable or nobody_serving:
                reason = LaunchReason.BACKLOG
            else:
                reason = LaunchReason.MINIMUM_FLEET
            can_wait = priority == "normal" and reason in (LaunchReason.FORECAST, LaunchReason.SUSTAINED_DEMAND)
            outbid_now = bool(fleet.outbid)
            bids = math.floor(growth * config.bid_share) if can_wait and healthy > 0 and not outbid_now else 0
            choice = bid_choice(snapshot.bid_outcomes, gpu_models, config) if bids else None
            if choice is not None:
                numbers += f"; {choice.describe()}"
            if choice is None or choice.markup is None:
                bids = 0
            markup = config.bid_markup if choice is None or choice.markup is None else choice.markup
            launches.append(LaunchPlan(growth, priority, reason, gpu_models, bids, markup))

    def arriving_needed() -> int:
        """Machines on the way that the demand still needs: all while arrivals rise (the forecast alone swings
        between runs as a ramp's slope gate opens and closes, and giving back on it launched and cancelled in
        turns: diurnal 291 → 318 $, 53 wasted launches); else those the kept rate needs beyond the producers,
        and those that land before the queue is down to the tolerance."""
        if sustained or foreseen or slope_per_h2 > 0 or not signal.windows:
            return arriving
        short = min(signal.windows, key=lambda w: w.window_s).arrival_rate_per_h
        trend = min(signal.windows, key=lambda w: abs(w.window_s - config.trend_window_s)).arrival_rate_per_h
        if short > trend:
            return arriving
        for_queue = machines_needed_for_backlog(
            backlog_tasks=pending,
            arrival_per_h=max(short, rate_now),
            machines_now=healthy,
            ready_offsets=offsets,
            throughput_per_h=thr,
            tolerance_tasks=config.backlog_tolerance_machine_h * thr,
        )
        return max(for_queue, keep - healthy)

    if not launches and not resumes and rate_deficit <= 0 and not stalled_state:
        margin = config.falling_margin_fraction if declining else config.scale_down_margin_fraction
        removals += _scale_down(
            fleet,
            now,
            config,
            capacity=capacity,
            keep=keep,
            demand_present=demand_present,
            margin_fraction=margin,
            queue_empty=pending <= len(fleet.producing) * thr * config.empty_queue_s / 3600,
            producers_needed=math.ceil(rate_keep * (1 + config.busy_drain_headroom_fraction) / thr),
            arriving_needed=arriving_needed(),
        )

    explanation = _explain(launches, removals, numbers, stalled_state, resumes)
    return Recommendation(tuple(launches), tuple(removals), explanation, figures, tuple(resumes))


def _resumes(fleet: _Fleet, wanted: int, replacement_reason: LaunchReason | None) -> list[ResumePlan]:
    """Parked machines to start again for `wanted` launches: the most recently parked first (the longer a machine
    waits, the likelier another renter holds its GPU)."""
    latest_first = sorted(fleet.parked, key=lambda line: line.state_since, reverse=True)
    reason = replacement_reason or LaunchReason.SUSTAINED_DEMAND
    return [ResumePlan(line.instance_id, reason) for line in latest_first[: max(0, wanted)]]


def _failed_and_drained(fleet: _Fleet, now: datetime, config: PolicyConfig, stalled_state: bool) -> list[RemovalPlan]:
    removals = [
        RemovalPlan("destroy", line.instance_id, FAILURE_TO_REMOVAL.get(line.failure_reason, RemovalReason.FAILED))
        if line.failure_reason
        else RemovalPlan("destroy", line.instance_id, RemovalReason.FAILED)
        for line in fleet.failed
    ]
    if stalled_state:
        return removals  # while workers are stalled nothing is given back, not even a drained machine
    for line in fleet.draining:
        draining_s = (now - line.state_since).total_seconds()
        finished = draining_s >= config.drain_grace_s and _silent_for_s(line, now) >= config.drain_grace_s
        if finished or draining_s >= config.max_drain_s:
            # parked (vast's stop keeps its disk and image) when parking, else given back
            removals.append(
                RemovalPlan("stop", line.instance_id, RemovalReason.PARK)
                if config.park
                else RemovalPlan("destroy", line.instance_id, RemovalReason.IDLE)
            )
    return removals


def _scale_down(
    fleet: _Fleet,
    now: datetime,
    config: PolicyConfig,
    *,
    capacity: int,
    keep: int,
    demand_present: bool,
    margin_fraction: float,
    queue_empty: bool,
    producers_needed: int,
    arriving_needed: int,
) -> list[RemovalPlan]:
    surplus = capacity - keep
    margin = max(1, math.ceil(keep * margin_fraction))
    if surplus < margin:
        return []
    # machines on the way that the kept demand no longer needs go first, the last to arrive first: each hour
    # one stays billed before producing is paid for nothing (the look-back keep rate covers a startup time, so a
    # demand that comes back within one still finds them). Only once the producers alone carry today's demand:
    # while a ramp's slope gate opens and closes between runs, giving them back launched them again in turns
    # (diurnal 323 → 3,165 $)
    billed = ARRIVING_STATES if config.loading_billed else BILLED_ARRIVING_STATES
    # a resumed machine counts as on the way until its worker completes a task; one the demand does not need is
    # parked again (its disk kept), the latest resumed first
    on_the_way = fleet.arriving + fleet.resuming
    latest_first = sorted(on_the_way, key=lambda line: max(line.created_at, line.state_since), reverse=True)
    spare = min(capacity - math.ceil(keep * config.arriving_keep_factor), len(on_the_way) - arriving_needed)
    given_back = [
        RemovalPlan("stop", line.instance_id, RemovalReason.PARK)
        if line.state is InstanceState.RESUMING
        else RemovalPlan("destroy", line.instance_id, RemovalReason.OVER_PROVISIONED)
        for line in latest_first[: max(0, spare)]
        if line.state in billed or line.state is InstanceState.RESUMING
    ]
    surplus -= len(given_back)
    if surplus <= 0:
        return given_back
    idle = [line for line in fleet.producing if _silent_for_s(line, now) >= config.idle_before_scale_down_s]
    # most expensive first, then the longest idle
    idle.sort(key=lambda line: (-line.price_usd_per_h, line.last_task_at or line.state_since))
    # a job system that spreads tasks over every worker leaves none idle for half an hour however large the
    # surplus: busy producers go too, the least recently busy first, but only while the queue is empty and the
    # producers left serve the kept rate with headroom (machines still loading cannot cover for them yet)
    spare_producers = len(fleet.producing) - producers_needed
    if queue_empty and len(idle) < min(surplus, spare_producers):
        chosen = {line.instance_id for line in idle}
        busy = [line for line in fleet.producing if line.instance_id not in chosen]
        busy.sort(key=lambda line: (line.last_task_at or line.state_since, -line.price_usd_per_h))
        idle += busy[: min(surplus, spare_producers) - len(idle)]
    # never the last producers while tasks wait or arrive
    removable = min(surplus, len(idle), len(fleet.producing) - 1 if demand_present else len(idle))
    reason = RemovalReason.OVER_PROVISIONED if demand_present or keep > 0 else RemovalReason.IDLE
    if config.park:
        # drained to be parked: once its tasks are done it is stopped, not destroyed (see _failed_and_drained)
        reason = RemovalReason.PARK
    return given_back + [RemovalPlan("drain", line.instance_id, reason) for line in idle[: max(0, removable)]]


def _explain(
    launches: list[LaunchPlan],
    removals: list[RemovalPlan],
    numbers: str,
    stalled_state: bool,
    resumes: list[ResumePlan] | None = None,
) -> str:
    parts = [f"resume {len(resumes)} parked ({resumes[0].reason.value})"] if resumes else []
    parts += [
        f"launch {plan.count} ({plan.reason.value}, {plan.launch_priority}"
        + (f", {plan.interruptible} interruptible" if plan.interruptible else "")
        + ")"
        for plan in launches
    ]
    for verb in ("drain", "destroy", "stop"):
        reasons = sorted({plan.reason.value for plan in removals if plan.verb == verb})
        if reasons:
            count = sum(1 for plan in removals if plan.verb == verb)
            parts.append(f"{verb} {count} ({', '.join(reasons)})")
    head = "; ".join(parts) if parts else "hold"
    stall = " workers stalled: replace, never scale down;" if stalled_state else ""
    return f"{head}:{stall} {numbers}"


class PredictivePolicy:
    """The predictive strategy behind the `Policy` interface."""

    name = "predictive"

    def __init__(self, config: PolicyConfig = DEFAULT_CONFIG) -> None:
        self.config = config

    def recommend(
        self, signal: DemandSignal, snapshot: FleetSnapshot, now: datetime, *, unobserved_launches: int = 0
    ) -> Recommendation:
        return recommend(signal, snapshot, now, self.config, unobserved_launches=unobserved_launches)
