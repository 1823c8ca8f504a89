"""Capacity arithmetic the predictive policy is built from: startup time, throughput, a fluid backlog model."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared import gpu_models
from shared.contract import DemandSignal, InstanceLine, InstanceState, SeasonEcho, WindowStats

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
    """Median launch→producing time of the machines that made it (first producing − created_at, less any time parked
    before that), else the default.

    Bounded so that one machine registered by hand (startup ≈ 0) or adopted after a restart cannot make the
    policy believe machines arrive in minutes. A resumed machine produces again a night after its creation: its
    first time producing is its startup, not the latest (parked overnight, the fleet read a 6 h startup and
    planned a whole startup's backlog on it). One parked once it had loaded and resumed before it ever produced
    waited parked between the two: that wait is no startup either (12 such machines read a 2.9 h startup in place of
    1.5 h, and the fleet sized on it gave back 61 machines on the way with 1,644 tasks queued).
    """
    samples = [
        ((line.first_producing_at or line.state_since) - line.created_at).total_seconds()
        - line.parked_before_producing_s
        for line in producing
        if line.state is InstanceState.PRODUCING and (line.first_producing_at or line.state_since) > line.created_at
    ]
    if len(samples) < min_samples:
        return default_s
    return min(max_s, max(min_s, statistics.median(samples)))


def throughput_per_machine(signal: DemandSignal, producing: Sequence[InstanceLine], default_per_h: float) -> float:
    """Tasks per hour one machine finishes: demand's measurement, else the fleet's, else the catalog's.

    demand measures a worker only while it had work; fleet's per-instance rate counts idle time too, so on a
    fleet with room to spare it reads what arrives, not what a machine can do (15/h on a steady trace's
    under-loaded start, which launched 27 machines): it only counts when it is above the catalog's
    reference for the fleet's models (`shared.gpu_models`), else the default.

    A fleet of several GPU models is measured model by model: each producer counts at its model's pace (demand's
    per-model estimate), averaged over the producers. demand's single per-worker figure averages the workers that
    had work in its window, and with room to spare the job system feeds the oldest machines first, so it swung
    between the fast and the slow models' pace from one run to the next (137 ↔ 186 tasks/h within 15 minutes on a
    diurnal train trace), and the fleet sized from it swung with it: machines launched, then given back loading.
    """
    by_model = signal.throughput_by_gpu_model_tasks_per_h
    if by_model and producing:
        fallback = signal.per_worker_throughput_tasks_per_h
        # looked up once per GPU model, not once per producer (a 1000-machine fleet has a handful of models)
        pace_of = {model: _model_pace(by_model, model) or fallback for model in {line.gpu_model for line in producing}}
        paces = [pace_of[line.gpu_model] for line in producing]
        known = [pace for pace in paces if pace]
        if len(known) == len(paces):
            return statistics.fmean(known)
    if signal.per_worker_throughput_tasks_per_h:
        return signal.per_worker_throughput_tasks_per_h
    catalog = catalog_paces(producing)
    prior = statistics.median(catalog) if catalog else default_per_h
    measured = [line.throughput_tasks_per_h for line in producing if line.throughput_tasks_per_h]
    if measured:
        return max(prior, statistics.median(m for m in measured if m is not None))
    return prior


def _model_pace(by_model: dict[str, float], gpu_model: str | None) -> float | None:
    if not gpu_model:
        return None
    key = gpu_models.normalised(gpu_model)
    return next((pace for name, pace in by_model.items() if gpu_models.normalised(name) == key), None)


def ready_offset_s(line: InstanceLine, now: datetime, startup_s: float) -> float:
    """Seconds from now until an arriving machine is expected to produce (now, if it is already late)."""
    return max(0.0, (line.created_at - now).total_seconds() + startup_s)


def model_reference(line: InstanceLine) -> float | None:
    """The catalog's tasks/h for `line`'s GPUs (shared.gpu_models); None for a model it does not know."""
    per_gpu = gpu_models.reference_tasks_per_h(line.gpu_model)
    return per_gpu * line.num_gpus if per_gpu is not None else None


def catalog_paces(lines: Iterable[InstanceLine]) -> list[float]:
    """`model_reference` of each machine whose GPU model the catalog knows."""
    return [pace for line in lines if (pace := model_reference(line))]


def backlog_after(
    duration_s: float,
    *,
    backlog_tasks: float,
    arrival_per_h: float,
    machines_now: int,
    ready_offsets: Sequence[float],
    throughput_per_h: float,
    surge_per_h: float | None = None,
    surge_s: float = 0.0,
) -> float:
    """Tasks still queued after `duration_s` (fluid model): arrivals in, capacity out, machines joining on time.

    Arrivals come at `surge_per_h` for the first `surge_s` (when given), at `arrival_per_h` after.
    `ready_offsets` must be sorted. Within a segment the net rate is constant, so clipping at zero at the end
    of each segment is exact.
    """
    breaks = sorted([*ready_offsets, surge_s] if surge_per_h is not None else ready_offsets)
    backlog = backlog_tasks
    machines = machines_now
    joined = 0
    t_s = 0.0
    for offset in [*breaks, duration_s]:
        end_s = min(offset, duration_s)
        if end_s > t_s:
            rate = surge_per_h if surge_per_h is not None and t_s < surge_s else arrival_per_h
            backlog = max(0.0, backlog + (rate - machines * throughput_per_h) * (end_s - t_s) / 3600)
            t_s = end_s
        if offset >= duration_s:
            break
        while joined < len(ready_offsets) and ready_offsets[joined] <= t_s:
            joined += 1
            machines += 1
    return backlog


def machines_needed_for_backlog(
    *,
    backlog_tasks: float,
    arrival_per_h: float,
    machines_now: int,
    ready_offsets: Sequence[float],
    throughput_per_h: float,
    tolerance_tasks: float,
) -> int:
    """How many of the machines on the way (sorted by `ready_offsets`) the queue needs: those that land before
    the machines ahead of them have brought it down to `tolerance_tasks` (fluid model, as `backlog_after`)."""
    backlog = backlog_tasks
    machines = machines_now
    t_s = 0.0
    for needed, offset in enumerate(ready_offsets):
        backlog = max(0.0, backlog + (arrival_per_h - machines * throughput_per_h) * (offset - t_s) / 3600)
        t_s = max(t_s, offset)
        if backlog <= tolerance_tasks:
            return needed
        machines += 1
    return len(ready_offsets)


def keep_arrival_rate_per_h(
    signal: DemandSignal, startup_s: float, declining: bool = False, trend_window_s: float = 3600.0
) -> float:
    """The arrival rate scale-down must still serve: the busiest window at least a startup time long.

    A machine given back costs a startup time to replace, so a lull shorter than that must not shed it; with
    no window that long, the longest one stands in; a window much longer is narrowed to the startup time.
    While arrivals fall significantly (see `falling`) the decline is no lull: the trend window alone stands in
    (the 6 h window kept a day's peak fleet for hours).
    """
    rates = [signal.sustained_arrival_rate_per_h]
    trend = _window(signal, trend_window_s)
    if declining and trend is not None:
        return max([*rates, trend.arrival_rate_per_h])
    if signal.windows:
        longest_s = max(window.window_s for window in signal.windows)
        span_s = min(startup_s, longest_s)
        shorter = [w for w in signal.windows if w.window_s < span_s]
        inner = max(shorter, key=lambda w: w.window_s) if shorter else None
        for w in signal.windows:
            if w.window_s < span_s:
                continue
            if inner is None or w.window_s <= span_s:
                rates.append(w.arrival_rate_per_h)
                continue
            # the rate over the last startup time, taking the part of the long window before the inner one as
            # uniform: a 6 h window stands for 1.5 h, so the evening's decline no longer keeps the night's fleet
            inner_tasks = inner.arrival_rate_per_h * inner.window_s
            rest_per_s = (w.arrival_rate_per_h * w.window_s - inner_tasks) / (w.window_s - inner.window_s)
            rates.append((inner_tasks + rest_per_s * (span_s - inner.window_s)) / span_s)
    return max(rates)


def slope_standard_error_per_h2(window: WindowStats, bucket_s: float = 60.0) -> float:
    """Standard error of a window's least-squares arrival slope if minute counts were Poisson at its mean rate.

    Var(slope) = 12 λ / (m (m² − 1)) per bucket² for m buckets of mean λ; at 600 tasks/h over one hour of
    minutes that is ≈ 85 tasks/h per h, so a ramp of a few hundred per hour per hour stands out of the noise.
    """
    buckets = max(2.0, window.window_s / bucket_s)
    per_bucket = max(window.arrival_rate_per_h, 1.0) * bucket_s / 3600
    per_bucket2 = math.sqrt(12 * per_bucket / (buckets * (buckets * buckets - 1)))
    return per_bucket2 * (3600 / bucket_s) ** 2


def _window(signal: DemandSignal, window_s: float) -> WindowStats | None:
    """The published window closest to `window_s` long."""
    return signal.window_near(window_s)


def rising_slope_per_h2(
    signal: DemandSignal, trend_window_s: float, min_z: float, max_jump_fraction: float = 0.2
) -> float:
    """The trend window's arrival slope when it is positive and stands out of minute noise, else 0.

    Demand's `rising` state needs arrivals up by half over an hour and stayed `steady` through most of a
    diurnal morning, so the policy reads the slope itself. Two gates keep bursts from being extrapolated:
    the slope must be `min_z` Poisson standard errors above zero, and the short window must still be above the
    trend window's mean (a burst that has passed leaves a positive slope but a lower recent rate). A step
    is no ramp either: the short window more than `max_jump_fraction` above the trend window's mean (a
    diurnal morning adds ≈ 15% per quarter hour, a spike several times the rate) is not extrapolated.
    """
    trend = _window(signal, trend_window_s)
    if trend is None or trend.arrival_trend_per_h2 <= 0:
        return 0.0
    if trend.arrival_trend_per_h2 < min_z * slope_standard_error_per_h2(trend):
        return 0.0
    short = signal.window_near(0)
    if short is None or short.arrival_rate_per_h < trend.arrival_rate_per_h:
        return 0.0
    # a ramp puts the short window on the trend line; a step (a spike) puts it well above: the line's rise from
    # the trend window's middle to the short window's, plus noise, must cover the short window's excess
    rise = trend.arrival_trend_per_h2 * (trend.window_s - short.window_s) / 2 / 3600
    short_error = math.sqrt(max(short.arrival_rate_per_h, 1.0) * 3600 / short.window_s)
    excess = short.arrival_rate_per_h - trend.arrival_rate_per_h
    if (
        excess > 1.5 * rise + min_z * short_error
        or excess > max_jump_fraction * trend.arrival_rate_per_h + min_z * short_error
    ):
        return 0.0
    return trend.arrival_trend_per_h2


def falling(signal: DemandSignal, trend_window_s: float, min_z: float) -> bool:
    """Arrivals falling significantly over the trend window and the short window below its mean: a decline."""
    trend = _window(signal, trend_window_s)
    if trend is None or trend.arrival_trend_per_h2 >= 0:
        return False
    short = signal.window_near(0)
    significant = -trend.arrival_trend_per_h2 >= min_z * slope_standard_error_per_h2(trend)
    return significant and short is not None and short.arrival_rate_per_h <= trend.arrival_rate_per_h


def base_arrival_rate_per_h(signal: DemandSignal, slope_per_h2: float = 0.0) -> float:
    """The rate to plan from: the sustained rate (the lower of 15 and 30 min, so a burst is not taken for
    demand); along a significant rising slope, the shortest window's (sustained lags a ramp by 15 min)."""
    short = signal.window_near(0)
    if slope_per_h2 <= 0 or short is None:
        return signal.sustained_arrival_rate_per_h
    return max(signal.sustained_arrival_rate_per_h, short.arrival_rate_per_h)


def arrival_forecast_per_h(
    signal: DemandSignal, horizon_mid_s: float, cap_factor: float, *, slope_per_h2: float, damping_s: float = 0.0
) -> float:
    """Base rate, extrapolated along a significant rising slope to the middle of the planning horizon, capped.

    The shortest window's mean lies half a window in the past, so the extrapolation starts from there. The slope
    is damped (`damped_ahead_s`) when `damping_s` is set. A falling trend is not extrapolated: shrinking is
    decided by the keep rate, idle time and hysteresis.
    """
    rate = base_arrival_rate_per_h(signal, slope_per_h2)
    short = signal.window_near(0)
    if slope_per_h2 <= 0 or short is None:
        return rate
    ahead_s = damped_ahead_s(horizon_mid_s + short.window_s / 2, damping_s)
    return min(rate + slope_per_h2 * ahead_s / 3600, rate * cap_factor)


def damped_ahead_s(ahead_s: float, damping_s: float) -> float:
    """How far ahead a damped trend carries the slope: τ(1 − e^(−h/τ)), close to h within τ, never beyond τ.

    The continuous form of Gardner and McKenzie's damped trend (1985), a benchmark the M competitions found hard
    to beat: an hour of arrivals says how steep a rise is, not how long it goes on, and a straight line carried
    hours ahead bets on the longest. `damping_s` 0: a straight line."""
    if damping_s <= 0:
        return ahead_s
    return damping_s * -math.expm1(-ahead_s / damping_s)


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


@dataclass(frozen=True)
class SeasonalForecast:
    """Yesterday's shape, scaled to today's level: the arrival rates a day ago's next hours suggest."""

    level_ratio: float  # today's level ÷ the same time one season ago, within the configured bounds
    planning_rate_per_h: float  # mean over [startup, startup + planning window]
    keep_rate_per_h: float  # the busiest hour starting within the next startup time


def _echo_rate_per_h(echo: SeasonEcho, then_s: float, from_s: float, to_s: float) -> float | None:
    """Mean rate over [then + from, then + to] from the echo's buckets (overlap-weighted); None if not covered."""
    start_s = echo.starts_at.timestamp()
    total = covered = 0.0
    for i, rate in enumerate(echo.rates_then_per_h):
        lo = max(start_s + i * echo.bucket_s, then_s + from_s)
        hi = min(start_s + (i + 1) * echo.bucket_s, then_s + to_s)
        if hi > lo:
            total += rate * (hi - lo)
            covered += hi - lo
    return total / covered if covered > 0 else None


def echo_level_per_h(echo: SeasonEcho, then_s: float, window_s: float) -> float:
    """That day's arrival rate over the `window_s` before `then_s`, to compare with today's last `window_s`.

    The echo holds the hour before its first bucket and the buckets from there on. For a window an hour or longer
    the hour stands in; for a shorter one the rate is read between the hour's middle and the first bucket's, at
    the window's middle: on a ramp, today's last quarter hour set against that day's whole hour reads a day that
    merely repeats as a busier one."""
    level = echo.level_then_per_h
    if window_s >= 3600.0 or not echo.rates_then_per_h:
        return level
    start_s = echo.starts_at.timestamp()
    hour_mid_s, first_mid_s = start_s - 1800.0, start_s + echo.bucket_s / 2
    share = (then_s - window_s / 2 - hour_mid_s) / (first_mid_s - hour_mid_s)
    return level + min(1.0, max(0.0, share)) * (echo.rates_then_per_h[0] - level)


def seasonal_forecast(
    signal: DemandSignal,
    now: datetime,
    *,
    startup_s: float,
    planning_window_s: float,
    ratio_bounds: tuple[float, float],
    level_window_s: float = 3600.0,
) -> SeasonalForecast | None:
    """What followed this moment one season ago, scaled by how today's last `level_window_s` compares with that
    day's (`echo_level_per_h`).

    None without an echo, without arrivals in that hour (nothing to scale), when today's level is below the
    bounds of that day's (today is not that day: a queue that stopped, a holiday), or when the echo does not
    reach the planning window. Above the bounds, the shape is kept at the upper bound (today's own sustained rate
    still rules where it is higher): a busier day still peaks and falls when that day did. Dropped there, the
    slope was extrapolated up a ramp's steepest hour instead (growth train seed 102, 2.5 × the day before:
    12,000 tasks/h planned at a 5,800/h peak; train seeds 100-102, 0.722 → 0.718 of the best baseline).
    """
    echo = signal.season
    level = _window(signal, level_window_s)
    if echo is None or level is None:
        return None
    then_s = (now - timedelta(seconds=echo.season_s)).timestamp()
    level_then = echo_level_per_h(echo, then_s, level.window_s)
    if level_then <= 0:
        return None
    low, high = ratio_bounds
    ratio = level.arrival_rate_per_h / level_then
    if ratio < low:
        return None
    ratio = min(ratio, high)
    planning = _echo_rate_per_h(echo, then_s, startup_s, startup_s + planning_window_s)
    if planning is None:
        return None
    hours = [
        _echo_rate_per_h(echo, then_s, start_s, start_s + 3600.0)
        for start_s in range(0, max(1, int(startup_s)), echo.bucket_s)
    ]
    keep = max((rate for rate in hours if rate is not None), default=planning)
    return SeasonalForecast(ratio, planning * ratio, keep * ratio)
