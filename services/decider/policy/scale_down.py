"""Scale-down: machines on the way the demand no longer needs given back, then idle (or, with an empty queue,
the least busy) producers drained, never the last ones while tasks wait."""

from __future__ import annotations

import math
from datetime import datetime

from services.decider.policy.base import RemovalPlan
from services.decider.policy.config import PolicyConfig
from services.decider.policy.fleet_view import FleetView, silent_for_s
from services.decider.policy.forecast import (
    ARRIVING_STATES,
    machines_needed_for_backlog,
    slope_standard_error_per_h2,
)
from services.decider.policy.parking import standby_lacking
from services.decider.policy.sizing import Sizing, waiting_for_gpu
from shared.contract import DemandSignal, InstanceState, RemovalReason

# vast bills GPU time from `running`: before that an instance costs its disk only
BILLED_ARRIVING_STATES = frozenset({InstanceState.RUNNING, InstanceState.REGISTERED, InstanceState.BENCHMARKED})
# machines on the way whose image is pulled and whose container ran: one the demand no longer needs is parked, not
# destroyed, when parking pays (a stop keeps the startup it already paid for, and a start brings it back in minutes
# where a new launch takes hours)
LOADED_STATES = BILLED_ARRIVING_STATES


def scale_down_plan(
    signal: DemandSignal,
    fleet: FleetView,
    s: Sizing,
    now: datetime,
    config: PolicyConfig,
    on_the_way_kept: int = 0,
) -> list[RemovalPlan]:
    """`on_the_way_kept`: machines on the way the expected-cost choice keeps (mpc.on_the_way_kept), never given
    back here."""
    margin = config.falling_margin_fraction if s.declining else config.scale_down_margin_fraction
    return scale_down(
        fleet,
        now,
        config,
        capacity=s.capacity,
        keep=s.keep,
        demand_present=s.demand_present,
        margin_fraction=margin,
        queue_empty=s.pending <= len(fleet.producing) * s.thr * config.empty_queue_s / 3600,
        producers_needed=math.ceil(s.rate_keep * (1 + config.busy_drain_headroom_fraction) / s.thr),
        arriving_needed=max(arriving_needed(signal, s, config), on_the_way_kept) + standby_on_the_way(s, fleet, config),
        idle_after_s=idle_after_s(signal, config),
    )


def standby_on_the_way(s: Sizing, fleet: FleetView, config: PolicyConfig) -> int:
    """Machines on the way kept for the standby pool (growth.standby_short) until they produce; idle, they are
    parked like any surplus producer. Given back while loading, each was launched again at the next quiet run."""
    return min(len(fleet.arriving), standby_lacking(max(s.keep, s.target), s.healthy, fleet, config))


def idle_after_s(signal: DemandSignal, config: PolicyConfig) -> float:
    """How long a producer must be silent to count as idle: the configured time, or a few of the longest mean
    task duration demand measured, whichever is longer (a worker between tasks is not idle)."""
    durations = [w.mean_task_duration_s for w in signal.windows if w.mean_task_duration_s]
    return max(config.idle_before_scale_down_s, config.idle_task_multiple * max(durations, default=0.0))


def arriving_needed(signal: DemandSignal, s: Sizing, config: PolicyConfig) -> int:
    """Machines on the way that the demand still needs: all while arrivals rise (the forecast alone swings
    between runs as a ramp's slope gate opens and closes, and giving back on it launched and cancelled in
    turns: diurnal 291 → 318 $, 53 wasted launches); else those the kept rate needs beyond the producers,
    and those that land before the queue is down to the tolerance.

    Rising is read loosely here, where the launch reads it strictly: the trend window's slope above zero, however
    faint (`arriving_kept_min_slope_z`), keeps them. On a first morning the slope gate closed between two runs
    and six machines on the way were destroyed with 61 tasks queued and arrivals still climbing; 32 were launched
    again within the half hour (diurnal, seed 200, one day). A machine kept one run too long costs minutes of
    loading; one given back on a ramp costs its startup again."""
    short, trend = signal.window_near(0), signal.window_near(config.trend_window_s)
    if s.sustained or s.foreseen or s.slope_per_h2 > 0 or short is None or trend is None:
        return s.arriving
    faint_rise = config.arriving_kept_min_slope_z * slope_standard_error_per_h2(trend)
    if short.arrival_rate_per_h > trend.arrival_rate_per_h or trend.arrival_trend_per_h2 > faint_rise:
        return s.arriving
    for_queue = machines_needed_for_backlog(
        backlog_tasks=s.pending,
        arrival_per_h=max(short.arrival_rate_per_h, s.rate_now),
        machines_now=s.healthy,
        ready_offsets=s.offsets,
        throughput_per_h=s.thr,
        tolerance_tasks=config.backlog_tolerance_machine_h * s.thr,
    )
    return max(for_queue, s.keep - s.healthy)


def scale_down(
    fleet: FleetView,
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
    idle_after_s: float | None = None,
) -> list[RemovalPlan]:
    """`idle_after_s`: silence that makes a producer idle (default: the configured idle_before_scale_down_s)."""
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
    # parked again (its disk kept), the latest resumed first. A resume still waiting for its GPU goes before any:
    # sizing does not count it (`waiting_for_gpu`), so the spare it makes is itself. Taken from the newest machine
    # instead, that spare gave back one that was coming (a busy demo's first morning destroyed one loading and
    # parked another while the queue grew, each time a resume passed its GPU wait)
    waiting = {line.instance_id for line in fleet.resuming if waiting_for_gpu(line, now, config)}
    on_the_way = fleet.arriving + fleet.resuming
    latest_first = sorted(
        on_the_way,
        key=lambda line: (line.instance_id in waiting, max(line.created_at, line.state_since)),
        reverse=True,
    )
    spare = min(capacity - math.ceil(keep * config.arriving_keep_factor), len(on_the_way) - arriving_needed)
    given_back = [
        RemovalPlan("stop", line.instance_id, RemovalReason.PARK)
        if line.state is InstanceState.RESUMING or (config.park and line.state in LOADED_STATES)
        else RemovalPlan("destroy", line.instance_id, RemovalReason.OVER_PROVISIONED)
        for line in latest_first[: max(0, spare)]
        if line.state in billed or line.state is InstanceState.RESUMING
    ]
    surplus -= len(given_back)
    if surplus <= 0:
        return given_back
    idle_s = config.idle_before_scale_down_s if idle_after_s is None else idle_after_s
    if not queue_empty:
        # with tasks waiting for the fleet a silent worker is slow or stalled, not idle (config.idle_while_queued_s):
        # the busy demo drained and parked a slow machine with 321 tasks queued, silent 12 minutes between batches
        idle_s = max(idle_s, config.idle_while_queued_s)
    idle = [line for line in fleet.producing if silent_for_s(line, now) >= idle_s]
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
