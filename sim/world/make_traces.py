"""Generates the bundled traces in sim/traces/ from fixed seeds: `python -m sim.world.make_traces [--check]`.

Each trace is an hourly rate profile (tasks/h) sampled as Poisson arrivals per minute. Rates are sized in
reference machines: one RTX 4090-class machine finishes ~120 tasks/h, so 2400 tasks/h keeps ~20 busy.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.world.trace import Trace, format_trace

TRACES_DIR = Path(__file__).resolve().parent.parent / "traces"
REFERENCE_TASKS_PER_H = 120.0
DAY_MIN = 24 * 60


def _day_curve(hour_of_day: float) -> float:
    """0 at night, 1 at the 14:00 peak: a working day's shape, smooth at both ends."""
    if not 6.0 <= hour_of_day <= 23.0:
        return 0.0
    return math.sin(math.pi * (hour_of_day - 6.0) / 17.0) ** 2


def _poisson(rates_per_h: np.ndarray, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.poisson(np.maximum(rates_per_h, 0.0) / 60.0)]


def _profile(minutes: int, rate_at_h: Callable[[float], float]) -> np.ndarray:
    return np.array([rate_at_h(m / 60.0) for m in range(minutes)], dtype=float)


def steady() -> list[int]:
    return _poisson(_profile(DAY_MIN, lambda h: 2400.0), seed=1)


def diurnal() -> list[int]:
    # two days: 600 tasks/h at night (5 machines), 3600 tasks/h at the afternoon peak (30 machines)
    return _poisson(_profile(2 * DAY_MIN, lambda h: 600.0 + 3000.0 * _day_curve(h % 24)), seed=2)


def spike() -> list[int]:
    # 1200 tasks/h, and from 10:00 a 45-minute spike at 7200 tasks/h (a batch submitted by one customer)
    def rate(h: float) -> float:
        return 7200.0 if 10.0 <= h < 10.75 else 1200.0

    return _poisson(_profile(DAY_MIN, rate), seed=3)


def ramp() -> list[int]:
    # 300 tasks/h for two hours, then a steady climb to 4800 tasks/h at hour 14, held to the end of the day
    def rate(h: float) -> float:
        if h < 2.0:
            return 300.0
        return 300.0 + 4500.0 * min(1.0, (h - 2.0) / 12.0)

    return _poisson(_profile(DAY_MIN, rate), seed=4)


def bursty() -> list[int]:
    # a volatile queue: a base rate that wanders every 15 min, plus bursts of 50-400 tasks within 1-3 minutes
    rng = np.random.default_rng(5)
    level = np.exp(np.cumsum(rng.normal(0.0, 0.3, DAY_MIN // 15 + 1)) * 0.5)
    base = np.repeat(900.0 * level / level.mean(), 15)[:DAY_MIN]
    arrivals = np.array(_poisson(base, seed=50))
    minute = 0
    while True:
        minute += int(rng.exponential(40.0)) + 1
        if minute >= DAY_MIN - 3:
            break
        size, spread = int(rng.integers(50, 401)), int(rng.integers(1, 4))
        arrivals[minute : minute + spread] += np.diff(np.linspace(0, size, spread + 1).round().astype(int))
    return [int(x) for x in arrivals]


def decline() -> list[int]:
    # 3000 tasks/h for two hours, falling to nothing by hour 10, then a quiet day: what does the fleet keep?
    def rate(h: float) -> float:
        if h < 2.0:
            return 3000.0
        return max(0.0, 3000.0 * (1.0 - (h - 2.0) / 8.0))

    return _poisson(_profile(DAY_MIN, rate), seed=6)


def week() -> list[int]:
    # seven days starting Monday 00:00: weekday peaks need 1000 reference machines, nights a quarter of
    # that, the weekend 40% of a weekday
    peak, night = 1000 * REFERENCE_TASKS_PER_H, 250 * REFERENCE_TASKS_PER_H

    def rate(h: float) -> float:
        day, hour = int(h // 24), h % 24
        scale = 0.4 if day >= 5 else 1.0
        return scale * (night + (peak - night) * _day_curve(hour))

    return _poisson(_profile(7 * DAY_MIN, rate), seed=7)


GENERATORS: dict[str, Callable[[], list[int]]] = {
    "steady": steady,
    "diurnal": diurnal,
    "spike": spike,
    "ramp": ramp,
    "bursty": bursty,
    "decline": decline,
    "week": week,
}


def bundled_trace_paths() -> list[Path]:
    return [TRACES_DIR / f"{name}.csv" for name in GENERATORS]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=TRACES_DIR)
    parser.add_argument("--check", action="store_true", help="fail if a committed trace differs from its generator")
    args = parser.parse_args(argv)
    stale = []
    for name, generate in GENERATORS.items():
        text = format_trace(Trace.of(generate(), name))
        path = args.out / f"{name}.csv"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"{path.name}: {text.count(chr(10)) - 1} minutes")
    if stale:
        print(f"traces differ from their generator: {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
