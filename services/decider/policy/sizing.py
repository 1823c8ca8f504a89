"""How big the fleet should be: the numbers every other planner reads.

Target = machines for the forecast arrival rate over [now + startup, + planning window], plus those needed to
drain, within a target time, the backlog the current and arriving fleet will have left when new machines land.
Keep = the same for the rate the fleet should keep serving (the look-back or yesterday's shape). A surge
(arrivals above capacity, not yet sustained) is planned from its own evidence instead of its rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.decider.policy.base import PolicyFigures
from services.decider.policy.config import PolicyConfig
from services.decider.policy.fleet_view import FleetView, stalled_producers
from services.decider.policy.forecast import (
    SeasonalForecast,
    arrival_forecast_per_h,
    backlog_after,
    base_arrival_rate_per_h,
    catalog_paces,
    ceil_machines,
    falling,
    keep_arrival_rate_per_h,
    learned_startup_s,
    model_reference,
    ready_offset_s,
    rising_slope_per_h2,
    seasonal_forecast,
    throughput_per_machine,
)
from shared.contract import DemandSignal, DemandState, InstanceLine
from shared.lifecycle import resume_stage


@dataclass(frozen=True)
class Sizing:
    thr: float  # tasks/h one machine serves
    startup_s: float
    stalled_state: bool  # demand says workers are stalled with tasks queued
    stalled: list[InstanceLine]  # the producers taken as stalled then
    healthy: int  # producers not stalled
    pending: int
    slope_per_h2: float  # the arrival rate's rising slope (0 unless significant)
    declining: bool
    rate_now: float  # arrivals until new machines land
    season: SeasonalForecast | None
    rate_up: float  # the planning rate: what new machines must serve
    rate_keep: float  # the rate the fleet keeps serving
    trend_capped: bool  # `rate_up` is the rising trend held at `trend_cap_factor` × the current rate
    offsets: list[float]  # seconds until each machine on the way produces, sorted
    arriving: int
    # each machine on the way (in `offsets` order) as a multiple of `thr`: its GPU model's pace
    arriving_weights: list[float]
    capacity: int  # healthy producers and machines on the way
    drain_h: float
    surge_s: float  # a surge's age (at least surge_min_s): it is expected to last as long again
    backlog_at_horizon: float
    drain_machines: float
    surge_left: float  # tasks a surge leaves once machines launched now have drained for the surge target
    surge_machines: int
    demand_present: bool
    target: int
    keep: int
    sustained: bool  # arrivals above capacity for long, or rising beyond what the fleet will have
    foreseen: bool  # yesterday's shape says the demand is coming
    nobody_serving: bool
    undrainable: bool  # what the fleet and those on the way cannot clear before a new machine could help
    planned_from_rate: bool


def size(
    signal: DemandSignal, fleet: FleetView, now: datetime, config: PolicyConfig, unobserved_launches: int
) -> Sizing:
    thr = throughput_per_machine(signal, fleet.producing, config.machine_prior_tasks_per_h)
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
    rates = _rates(signal, now, startup_s, config)
    arrivals = _arrivals(fleet, now, startup_s, config, unobserved_launches)
    capacity = healthy + arrivals.arriving
    drain_h = config.backlog_drain_target_s / 3600
    backlog = _backlog(
        signal, config, thr=thr, startup_s=startup_s, healthy=healthy, rate_now=rates.rate_now, offsets=arrivals.offsets
    )
    drain_machines = backlog.at_horizon / (thr * drain_h)
    surge_machines = ceil_machines(
        backlog.surge_left / (thr * config.surge_drain_target_s / 3600), config.round_slack_machines
    )
    demand_present = pending > 0 or rates.rate_now > 0
    target = _machines_for(rates.rate_up, thr, drain_machines, demand_present, config)
    keep = _machines_for(rates.rate_keep, thr, drain_machines, demand_present, config)

    sustained = signal.above_capacity_for_s >= config.sustained_for_s or (rates.slope_per_h2 > 0 and target > capacity)
    # yesterday's shape is no burst: when it says the demand is coming, machines leave in time to meet it
    foreseen = rates.season is not None and rates.season.planning_rate_per_h > signal.sustained_arrival_rate_per_h
    # what the fleet and the machines on the way cannot clear before a new machine could help: launch for that
    # now; a burst they clear launches nothing, however high its rate looked for a minute
    undrainable = backlog.surge_left > config.backlog_tolerance_machine_h * thr
    return Sizing(
        thr=thr,
        startup_s=startup_s,
        stalled_state=stalled_state,
        stalled=stalled,
        healthy=healthy,
        pending=pending,
        slope_per_h2=rates.slope_per_h2,
        declining=rates.declining,
        rate_now=rates.rate_now,
        season=rates.season,
        rate_up=rates.rate_up,
        rate_keep=rates.rate_keep,
        trend_capped=rates.trend_capped,
        offsets=arrivals.offsets,
        arriving=arrivals.arriving,
        arriving_weights=arrivals.weights,
        capacity=capacity,
        drain_h=drain_h,
        surge_s=backlog.surge_s,
        backlog_at_horizon=backlog.at_horizon,
        drain_machines=drain_machines,
        surge_left=backlog.surge_left,
        surge_machines=surge_machines,
        demand_present=demand_present,
        target=target,
        keep=keep,
        sustained=sustained,
        foreseen=foreseen,
        nobody_serving=capacity == 0 and pending > 0,
        undrainable=undrainable,
        planned_from_rate=sustained or foreseen or stalled_state or capacity < config.min_machines,
    )


@dataclass(frozen=True)
class _Rates:
    slope_per_h2: float
    declining: bool
    rate_now: float
    season: SeasonalForecast | None
    rate_up: float
    rate_keep: float
    trend_capped: bool  # the rise, carried ahead, would pass `trend_cap_factor` × the rate: held there


def _rates(signal: DemandSignal, now: datetime, startup_s: float, config: PolicyConfig) -> _Rates:
    """The arrival rates: until new machines land, the one they must serve, and the one the fleet keeps serving."""
    slope_per_h2 = rising_slope_per_h2(
        signal, config.trend_window_s, config.trend_min_z, config.trend_max_jump_fraction
    )
    declining = falling(signal, config.trend_window_s, config.trend_min_z)
    base_rate = base_arrival_rate_per_h(signal, slope_per_h2)
    # arrivals until new machines land: the mean of the base rate and the forecast at the startup horizon
    rate_now = (
        base_rate
        + arrival_forecast_per_h(
            signal, startup_s, config.trend_cap_factor, slope_per_h2=slope_per_h2, damping_s=config.trend_damping_s
        )
    ) / 2
    season = seasonal_forecast(
        signal,
        now,
        startup_s=startup_s,
        planning_window_s=config.planning_window_s,
        ratio_bounds=config.season_ratio_bounds,
        level_window_s=config.season_level_window_s,
    )
    if season is not None:
        # a day ago's next hours know where a ramp flattens and when the evening falls, which no slope does:
        # they replace the extrapolation and the look-back (week trace: 1.55 → 1.34 of the bound), while
        # today's sustained rate still rules when today runs above yesterday's shape
        rate_up = max(season.planning_rate_per_h, signal.sustained_arrival_rate_per_h)
        keep_rate = max(season.keep_rate_per_h, signal.sustained_arrival_rate_per_h)
    else:
        horizon_mid_s = startup_s + config.planning_window_s / 2
        rate_up = arrival_forecast_per_h(
            signal, horizon_mid_s, config.trend_cap_factor, slope_per_h2=slope_per_h2, damping_s=config.trend_damping_s
        )
        keep_rate = keep_arrival_rate_per_h(signal, startup_s, declining, config.trend_window_s)
    trend_capped = season is None and slope_per_h2 > 0 and rate_up >= base_rate * config.trend_cap_factor
    return _Rates(
        slope_per_h2=slope_per_h2,
        declining=declining,
        rate_now=rate_now,
        season=season,
        rate_up=rate_up,
        rate_keep=max(rate_up, keep_rate),
        trend_capped=trend_capped,
    )


@dataclass(frozen=True)
class _Arrivals:
    offsets: list[float]
    arriving: int
    weights: list[float]


def _arrivals(
    fleet: FleetView, now: datetime, startup_s: float, config: PolicyConfig, unobserved_launches: int
) -> _Arrivals:
    """The machines on the way (booting, resuming, launched but not yet seen), when each starts producing and at
    what share of `thr`. A resume still waiting for its GPU past `resume_gpu_wait_s` is not counted: fleet fails
    it only later.

    A machine on the way produces at its GPU model's pace, not at the producers' average: a morning's first launch
    planned at the fleet's 151 tasks/h (RTX 5090s) rented RTX 3090s at ~55/h, and the shortfall showed only when
    they produced, two hours later (growth test seed 200). Counted at their own pace the next run launches what they
    lack. The catalog gives the ratio of the paces; the producers' measured pace (`thr`) gives the level. A launch
    is still planned at the producers' pace: what the market rents next is not known until it is rented (planned
    at the pace of the last rents, the demo launched 20 for slow machines, got fast ones and gave 8 back)."""
    resuming = [line for line in fleet.resuming if not waiting_for_gpu(line, now, config)]
    landing = [(ready_offset_s(line, now, startup_s), line) for line in fleet.arriving]
    landing += [(max(0.0, config.resume_s - (now - line.state_since).total_seconds()), line) for line in resuming]
    reference_per_h = producers_reference_per_h(fleet.producing, config.machine_prior_tasks_per_h)
    weighted = sorted(
        [(offset, machine_weight(line, reference_per_h)) for offset, line in landing]
        + [(startup_s, 1.0)] * unobserved_launches
    )
    return _Arrivals(
        offsets=[offset for offset, _ in weighted],
        arriving=len(fleet.arriving) + len(resuming) + unobserved_launches,
        weights=[weight for _, weight in weighted],
    )


def machine_weight(line: InstanceLine, reference_per_h: float) -> float:
    """One machine's pace as a multiple of the producers': the catalog's ratio of its GPUs to theirs
    (`reference_per_h`, the producers' mean reference). Demand's own per-model figure is no help here: a model's
    first completions count their run time as busy time, so a model just arriving reads ~15 tasks/h."""
    pace = model_reference(line)
    return pace / reference_per_h if pace and reference_per_h > 0 else 1.0


def producers_reference_per_h(producing: list[InstanceLine], default_per_h: float) -> float:
    """The catalog pace of the producers on average (what `thr` measures), the default without any known one."""
    paces = catalog_paces(producing)
    return sum(paces) / len(paces) if paces else default_per_h


def waiting_for_gpu(line: InstanceLine, now: datetime, config: PolicyConfig) -> bool:
    """A resume vast still shows stopped well past a restart's minutes: its GPU is likely someone else's."""
    stopped = resume_stage(line.vast_status) == "stopped"
    return stopped and (now - line.state_since).total_seconds() >= config.resume_gpu_wait_s


@dataclass(frozen=True)
class _Backlog:
    surge_s: float
    at_horizon: float
    surge_left: float


def _backlog(
    signal: DemandSignal,
    config: PolicyConfig,
    *,
    thr: float,
    startup_s: float,
    healthy: int,
    rate_now: float,
    offsets: list[float],
) -> _Backlog:
    """The backlog when new machines land, and what a surge leaves once they have drained for its target."""
    # a surge lasts as long again as it has lasted, then arrivals fall back to what the producers served before
    surge_s = max(signal.above_capacity_for_s, config.surge_min_s)

    def backlog_at(duration_s: float, *, surge: bool = False) -> float:
        return backlog_after(
            duration_s,
            backlog_tasks=signal.pending_tasks,
            arrival_per_h=min(rate_now, healthy * thr) if surge else rate_now,
            surge_per_h=rate_now if surge else None,
            surge_s=surge_s,
            machines_now=healthy,
            ready_offsets=offsets,
            throughput_per_h=thr,
        )

    return _Backlog(
        surge_s=surge_s,
        at_horizon=backlog_at(startup_s),
        surge_left=backlog_at(startup_s + config.surge_drain_target_s, surge=True),
    )


def _machines_for(
    rate_per_h: float, thr: float, drain_machines: float, demand_present: bool, config: PolicyConfig
) -> int:
    """Machines to serve a rate and drain the backlog; never none while any demand is present."""
    machines = max(ceil_machines(rate_per_h / thr + drain_machines, config.round_slack_machines), config.min_machines)
    return max(machines, 1) if demand_present else machines


def figures(s: Sizing, fleet: FleetView, unobserved_launches: int) -> PolicyFigures:
    return PolicyFigures(
        throughput_per_machine_tasks_per_h=round(s.thr, 3),
        startup_s=round(s.startup_s, 1),
        arrival_forecast_per_h=round(s.rate_up, 3),
        keep_arrival_rate_per_h=round(s.rate_keep, 3),
        pending_tasks=s.pending,
        backlog_at_horizon_tasks=round(s.backlog_at_horizon, 1),
        target_machines=s.target,
        keep_machines=s.keep,
        producing=len(fleet.producing),
        stalled_producers=len(s.stalled),
        arriving=s.arriving,
        unobserved_launches=unobserved_launches,
        sustained=s.sustained,
        undrainable_backlog=s.undrainable,
        season_level_ratio=None if s.season is None else round(s.season.level_ratio, 3),
    )


def numbers(s: Sizing, config: PolicyConfig) -> str:
    """The explanation's figures: what the target rests on, and a surge's plan when it drives the launch."""
    return (
        f"need {s.target} machines for {s.rate_up:.0f} tasks/h"
        + (f" (a day ago's shape ×{s.season.level_ratio:.2f})" if s.season is not None else "")
        + (f" (arrivals rising {s.slope_per_h2:.0f}/h per hour"
           + (f", damped over {config.trend_damping_s / 3600:g}h" if config.trend_damping_s > 0 else "")
           + (f", held at ×{config.trend_cap_factor:g} the current rate" if s.trend_capped else "")
           + ")" if s.season is None and s.slope_per_h2 > 0 else "")
        + f" at {s.thr:.0f}/h each over {s.startup_s / 3600:.1f}h startup"
        f" + {config.planning_window_s / 3600:.1f}h window"
        + (f" (+{s.backlog_at_horizon:.0f} tasks backlog then, {s.drain_machines:.1f} machines to drain in"
           f" {s.drain_h:.1f}h)" if s.backlog_at_horizon >= 1 else "")
        + f"; have {s.healthy} producing + {s.arriving} arriving"
        + (f" (worth {sum(s.arriving_weights):.1f} at their models' pace)"
           if abs(sum(s.arriving_weights) - len(s.arriving_weights)) >= 0.5 else "")
        + f", {s.pending} pending"
        + (f"; a surge {s.surge_s / 60:.0f} min old, expected to last as long again, leaves {s.surge_left:.0f} tasks"
           f" after {(s.startup_s + config.surge_drain_target_s) / 3600:.1f}h: {s.surge_machines} machines clear"
           " them" if not s.planned_from_rate and (s.undrainable or s.nobody_serving) else "")
    )  # fmt: skip
