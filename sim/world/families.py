"""Families of demand, generated from a seed: `fleetpilot sim traces --family NAME --seed N --days D`.

A policy tuned on the seven bundled traces can learn their shapes. Each family here is a kind of demand a
fleet meets (a working day, a week, growth, a flash crowd, lumpy batch submissions, a quiet queue with short
surges, a wandering rate, a mixture of these) whose every parameter is drawn from the seed: the height and
hour of the peak, the weekend's dip, the size and timing of every batch and crowd. Constants are fitted on
TRAIN_SEEDS and figures are reported on TEST_SEEDS, so a policy cannot win by remembering a shape.

Rates are sized in reference machines as the bundled traces are (one RTX 4090-class machine finishes ~120
tasks/h): each trace draws its level, the machines its ordinary peak needs, log-uniformly from 12 to 60.
Arrivals are Poisson around a rate that itself carries correlated noise, and batches are lumps of a
heavy-tailed size submitted within a few minutes; the result is written in the trace CSV format (trace.py).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.world.trace import Trace

# the only place train and test seeds are defined: constants are fitted on TRAIN, figures come from TEST
TRAIN_SEEDS = range(100, 105)
TEST_SEEDS = range(200, 210)
# more seeds on the train side, for telling apart two variants whose train figures lie within the seeds' noise;
# never reported as results, never run by the benchmark
SELECTION_SEEDS = range(105, 110)

REFERENCE_TASKS_PER_H = 120.0  # an RTX 4090-class machine, as sim/world/make_traces.py sizes the bundled traces
DAY_MIN = 24 * 60
MAX_DAYS = 60
LEVEL_MACHINES = (12.0, 60.0)  # the ordinary peak, log-uniform between these
NOISE_BLOCK_MIN = 15  # the rate's own noise changes every quarter hour (AR(1) in log space)


@dataclass(frozen=True)
class Demand:
    """A family's draw before Poisson sampling: the rate every minute, and batches added on top as lumps."""

    rates_per_h: np.ndarray  # tasks/h in each minute
    lumps: np.ndarray  # tasks submitted at once in each minute (batches), integers

    @property
    def minutes(self) -> int:
        return len(self.rates_per_h)


def _level_tasks_per_h(rng: np.random.Generator) -> float:
    low, high = LEVEL_MACHINES
    return float(math.exp(rng.uniform(math.log(low), math.log(high)))) * REFERENCE_TASKS_PER_H


def _hours(minutes: int) -> np.ndarray:
    return np.arange(minutes, dtype=float) / 60.0


def _rate_noise(rng: np.random.Generator, minutes: int, sigma: float, persistence: float = 0.8) -> np.ndarray:
    """A multiplicative factor around 1: AR(1) in log space per quarter hour, so busy quarters come in runs."""
    blocks = minutes // NOISE_BLOCK_MIN + 1
    shocks = rng.normal(0.0, sigma * math.sqrt(1 - persistence**2), blocks)
    log_factor = np.empty(blocks)
    log_factor[0] = rng.normal(0.0, sigma)
    for k in range(1, blocks):
        log_factor[k] = persistence * log_factor[k - 1] + shocks[k]
    return np.repeat(np.exp(log_factor - sigma**2 / 2), NOISE_BLOCK_MIN)[:minutes]


def _day_shape(rng: np.random.Generator, minutes: int) -> np.ndarray:
    """0 at night, 1 at the day's peak: a raised cosine around a peak hour drawn once, a working day wide."""
    peak_hour = rng.uniform(12.0, 17.0)
    half_width_h = rng.uniform(7.0, 10.0)
    hour_of_day = _hours(minutes) % 24.0
    distance = np.abs((hour_of_day - peak_hour + 12.0) % 24.0 - 12.0)
    return np.where(distance < half_width_h, np.cos(np.pi / 2 * distance / half_width_h) ** 2, 0.0)


def _daily(rng: np.random.Generator, minutes: int, level: float) -> np.ndarray:
    """A working day's rate: night at 15-35% of the peak, each day's height varying by ~6%, quarter-hour noise."""
    night = rng.uniform(0.15, 0.35)
    shape = _day_shape(rng, minutes)
    days = minutes // DAY_MIN + 1
    day_scale = np.repeat(rng.lognormal(0.0, 0.06, days), DAY_MIN)[:minutes]
    return level * (night + (1.0 - night) * shape) * day_scale * _rate_noise(rng, minutes, 0.15)


def diurnal(rng: np.random.Generator, minutes: int) -> Demand:
    return Demand(_daily(rng, minutes, _level_tasks_per_h(rng)), np.zeros(minutes, dtype=np.int64))


def weekly(rng: np.random.Generator, minutes: int) -> Demand:
    """Working days from Monday 00:00; Saturday and Sunday run at 30-60% of a weekday."""
    rates = _daily(rng, minutes, _level_tasks_per_h(rng))
    weekend = rng.uniform(0.3, 0.6)
    day_of_week = (np.arange(minutes) // DAY_MIN) % 7
    return Demand(np.where(day_of_week >= 5, rates * weekend, rates), np.zeros(minutes, dtype=np.int64))


def _trend(rng: np.random.Generator, minutes: int, total_factor: float) -> Demand:
    level = _level_tasks_per_h(rng)
    # the level at the start is chosen so that the busier end of the trace peaks at the drawn level
    start = level / max(1.0, total_factor)
    growth = np.exp(np.log(total_factor) * np.arange(minutes) / max(1, minutes - 1))
    return Demand(_daily(rng, minutes, start) * growth, np.zeros(minutes, dtype=np.int64))


def growth(rng: np.random.Generator, minutes: int) -> Demand:
    """Demand that grows 2-4x from the first day to the last, steadily (exponential), under the daily cycle."""
    return _trend(rng, minutes, rng.uniform(2.0, 4.0))


def decline(rng: np.random.Generator, minutes: int) -> Demand:
    """Demand that falls to a quarter to a half of where it started, steadily, under the daily cycle."""
    return _trend(rng, minutes, 1.0 / rng.uniform(2.0, 4.0))


def _crowd(minutes: int, start: int, height: float, rise_min: float, decay_min: float) -> np.ndarray:
    """A flash crowd: a linear rise over a few minutes, then an exponential decay (fast up, slow down)."""
    t = np.arange(minutes, dtype=float) - start
    rising = np.clip((t + 1) / rise_min, 0.0, 1.0)
    after_peak = np.maximum(t - rise_min, 0.0)
    return np.where(t >= 0, height * rising * np.exp(-after_peak / decay_min), 0.0)


def _crowds(rng: np.random.Generator, minutes: int, level: float, per_day: float) -> np.ndarray:
    extra = np.zeros(minutes)
    count = max(1, int(rng.poisson(per_day * minutes / DAY_MIN)))
    for _ in range(count):
        start = int(rng.integers(0, max(1, minutes - 60)))
        height = level * rng.uniform(1.0, 5.0)  # 1-5x the ordinary peak on top of what is there
        rise_min = rng.uniform(2.0, 10.0)
        decay_min = math.exp(rng.uniform(math.log(15.0), math.log(180.0)))  # a quarter hour to three hours
        extra += _crowd(minutes, start, height, rise_min, decay_min)
    return extra


def flash_crowd(rng: np.random.Generator, minutes: int) -> Demand:
    """A modest daily load (15-30% of the level) hit by flash crowds 1-5x the level high, lasting minutes to hours."""
    level = _level_tasks_per_h(rng)
    base = _daily(rng, minutes, level * rng.uniform(0.15, 0.3))
    return Demand(base + _crowds(rng, minutes, level, per_day=0.7), np.zeros(minutes, dtype=np.int64))


def _batches(rng: np.random.Generator, minutes: int, level: float) -> np.ndarray:
    """Batches at random times (Poisson, one every 1-4 h on average), heavy-tailed sizes (Pareto, alpha 1.2-1.6),
    each submitted within 1-10 minutes."""
    lumps = np.zeros(minutes, dtype=np.int64)
    mean_gap_min = rng.uniform(60.0, 240.0)
    alpha = rng.uniform(1.2, 1.6)
    # a batch is ~45 minutes of the level's work on average; the tail reaches several hours of it
    smallest = level * (45.0 / 60.0) * (alpha - 1) / alpha
    largest = level * 8.0
    minute = rng.exponential(mean_gap_min)
    while minute < minutes:
        size = int(min(largest, smallest * (1.0 + rng.pareto(alpha))))
        spread = int(rng.integers(1, 11))
        start = int(minute)
        end = min(minutes, start + spread)
        cumulative = np.linspace(0, size, end - start + 1).round().astype(np.int64)
        lumps[start:end] += cumulative[1:] - cumulative[:-1]
        minute += rng.exponential(mean_gap_min)
    return lumps


def batch(rng: np.random.Generator, minutes: int) -> Demand:
    """Lumpy batch submissions over a thin background trickle (2-8% of the level)."""
    level = _level_tasks_per_h(rng)
    background = level * rng.uniform(0.02, 0.08) * _rate_noise(rng, minutes, 0.3)
    return Demand(background, _batches(rng, minutes, level))


def quiet_surges(rng: np.random.Generator, minutes: int) -> Demand:
    """A quiet queue (1-5% of the level) with short surges: 5-40 minutes at 0.5-1.5x the level, every 2-6 h."""
    level = _level_tasks_per_h(rng)
    rates = level * rng.uniform(0.01, 0.05) * _rate_noise(rng, minutes, 0.3)
    mean_gap_min = rng.uniform(120.0, 360.0)
    minute = rng.exponential(mean_gap_min)
    while minute < minutes:
        start, length = int(minute), int(rng.integers(5, 41))
        rates[start : start + length] += level * rng.uniform(0.5, 1.5)
        minute += length + rng.exponential(mean_gap_min)
    return Demand(rates, np.zeros(minutes, dtype=np.int64))


RANDOM_WALK_STEP_MIN = 5


def random_walk(rng: np.random.Generator, minutes: int) -> Demand:
    """A rate with no cycle: its logarithm wanders every 5 minutes (volatility 0.25-0.5 per sqrt hour), pulled back
    towards the middle over about four hours so it neither dies out nor explodes."""
    level = _level_tasks_per_h(rng)
    volatility = rng.uniform(0.25, 0.5)
    step_h = RANDOM_WALK_STEP_MIN / 60.0
    reversion = step_h / 4.0
    steps = minutes // RANDOM_WALK_STEP_MIN + 1
    log_rate = np.empty(steps)
    log_rate[0] = rng.normal(0.0, 0.3)
    shocks = rng.normal(0.0, volatility * math.sqrt(step_h), steps)
    for k in range(1, steps):
        log_rate[k] = (1 - reversion) * log_rate[k - 1] + shocks[k]
    middle = level * 0.5
    return Demand(
        np.repeat(middle * np.exp(log_rate), RANDOM_WALK_STEP_MIN)[:minutes], np.zeros(minutes, dtype=np.int64)
    )


def mixture(rng: np.random.Generator, minutes: int) -> Demand:
    """Several sources on one queue: a working day, batches and flash crowds, each at its own drawn share."""
    level = _level_tasks_per_h(rng)
    day_share, batch_share, crowd_share = rng.dirichlet([3.0, 1.5, 1.0])
    rates = _daily(rng, minutes, level * max(day_share, 0.3))
    rates = rates + _crowds(rng, minutes, level * crowd_share, per_day=0.5)
    return Demand(rates, _batches(rng, minutes, level * max(batch_share, 0.1)))


FAMILIES: dict[str, Callable[[np.random.Generator, int], Demand]] = {
    "diurnal": diurnal,
    "weekly": weekly,
    "growth": growth,
    "decline": decline,
    "flash-crowd": flash_crowd,
    "batch": batch,
    "quiet-surges": quiet_surges,
    "random-walk": random_walk,
    "mixture": mixture,
}


def _check(family: str, seed: int, days: int) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be a whole number from 1 to {MAX_DAYS}, got {days!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")


def _rng(family: str, seed: int) -> np.random.Generator:
    # the family's name is part of the seed, so seed 200 of two families draws independently
    return np.random.default_rng([zlib.crc32(family.encode()), seed])


def demand(family: str, seed: int, days: int) -> Demand:
    """The family's rates and lumps for this seed, before Poisson sampling (what tests check shapes against)."""
    _check(family, seed, days)
    return FAMILIES[family](_rng(family, seed), days * DAY_MIN)


def trace_name(family: str, seed: int) -> str:
    return f"{family}-{seed}"


def generate(family: str, seed: int, days: int) -> Trace:
    """The trace: Poisson arrivals per minute around the family's rate, plus its batches as they were submitted."""
    drawn = demand(family, seed, days)
    arrivals = np.random.default_rng([zlib.crc32(family.encode()), seed, 1]).poisson(
        np.maximum(drawn.rates_per_h, 0.0) / 60.0
    )
    return Trace.of([int(x) for x in arrivals + drawn.lumps], trace_name(family, seed))
