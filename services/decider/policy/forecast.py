"""Capacity arithmetic the predictive policy is built from: startup time, throughput, a fluid backlog model."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from shared.contract import DemandSignal, DemandTrend, InstanceLine, InstanceState

ARRIVING_STATES = frozenset(
    {
        InstanceState.REQUESTED,
        InstanceState.LOADING,
        InstanceState.RUNNING,
        InstanceState.REGISTERED,
        InstanceState.BENCHMARKED,
    }
)


def learned_startup_s(
    producing: Iterable[InstanceLine], *, default_s: float, min_samples: int, min_s: float, max_s: float
) -> float:
    """Median launch→producing time of the machines that made it (state_since − created_at), else the default.

    Bounded so that one machine registered by hand (startup ≈ 0) or adopted after a restart cannot make the
    policy believe machines arrive in minutes.
    """
    samples = [
        (line.state_since - line.created_at).total_seconds()
        for line in producing
        if line.state is InstanceState.PRODUCING and line.state_since > line.created_at
    ]
    if len(samples) < min_samples:
        return default_s
    return min(max_s, max(min_s, statistics.median(samples)))


def throughput_per_machine(signal: DemandSignal, producing: Sequence[InstanceLine], default_per_h: float) -> float:
    """Tasks per hour one machine finishes: demand's measurement, else the fleet's, else the default."""
    if signal.per_worker_throughput_tasks_per_h:
        return signal.per_worker_throughput_tasks_per_h
    measured = [line.throughput_tasks_per_h for line in producing if line.throughput_tasks_per_h]
    if measured:
        return statistics.median(m for m in measured if m is not None)
    return default_per_h


def ready_offsets_s(arriving: Iterable[InstanceLine], now: datetime, startup_s: float) -> list[float]:
    """Seconds from now until each arriving machine is expected to produce (now, if it is already late)."""
    return sorted(max(0.0, (line.created_at - now).total_seconds() + startup_s) for line in arriving)


def backlog_after(
    duration_s: float,
    *,
    backlog_tasks: float,
    arrival_per_h: float,
    machines_now: int,
    ready_offsets: Sequence[float],
    throughput_per_h: float,
) -> float:
    """Tasks still queued after `duration_s` (fluid model): arrivals in, capacity out, machines joining on time.

    `ready_offsets` must be sorted. Within a segment the net rate is constant, so clipping at zero at the end
    of each segment is exact.
    """
    backlog = backlog_tasks
    machines = machines_now
    t_s = 0.0
    for offset in ready_offsets:
        if offset >= duration_s:
            break
        backlog = max(0.0, backlog + (arrival_per_h - machines * throughput_per_h) * (offset - t_s) / 3600)
        machines += 1
        t_s = max(t_s, offset)
    return max(0.0, backlog + (arrival_per_h - machines * throughput_per_h) * (duration_s - t_s) / 3600)


def keep_arrival_rate_per_h(signal: DemandSignal, startup_s: float) -> float:
    """The arrival rate scale-down must still serve: the busiest window at least a startup time long.

    A machine given back costs a startup time to replace, so a lull shorter than that must not shed it; with
    no window that long, the longest one stands in.
    """
    rates = [signal.sustained_arrival_rate_per_h]
    if signal.windows:
        longest_s = max(window.window_s for window in signal.windows)
        rates += [w.arrival_rate_per_h for w in signal.windows if w.window_s >= min(startup_s, longest_s)]
    return max(rates)


def arrival_forecast_per_h(signal: DemandSignal, horizon_mid_s: float, cap_factor: float) -> float:
    """Sustained rate, extrapolated along a rising trend to the middle of the planning horizon, capped.

    A falling trend is not extrapolated: shrinking is decided by `keep_arrival_rate_per_h`, idle time and
    hysteresis, never by a slope.
    """
    rate = signal.sustained_arrival_rate_per_h
    if not signal.windows or signal.trend is not DemandTrend.RISING:
        return rate
    longest = max(signal.windows, key=lambda w: w.window_s)
    slope_per_h2 = max(0.0, longest.arrival_trend_per_h2)
    return min(rate + slope_per_h2 * horizon_mid_s / 3600, max(rate * cap_factor, rate + longest.arrival_rate_per_h))


def ceil_machines(machines: float, slack: float) -> int:
    """Whole machines for a fractional need; a need within `slack` of a machine does not buy another one."""
    return max(0, math.ceil(machines - slack))


def rank_gpu_models(producing: Iterable[InstanceLine], limit: int = 3) -> tuple[str, ...]:
    """GPU models by measured dollars per task on this fleet, cheapest first."""
    usd_per_task: dict[str, list[float]] = defaultdict(list)
    for line in producing:
        if line.gpu_model and line.throughput_tasks_per_h and line.price_usd_per_h > 0:
            usd_per_task[line.gpu_model].append(line.price_usd_per_h / line.throughput_tasks_per_h)
    ranked = sorted(usd_per_task, key=lambda model: statistics.mean(usd_per_task[model]))
    return tuple(ranked[:limit])
