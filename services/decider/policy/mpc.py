"""How many machines to launch now, chosen by expected cost over demand scenarios (receding horizon).

Each run builds a small set of weighted demand scenarios from what the signal says (the planning forecast, the
level's uncertainty, and, while arrivals run above capacity without being sustained, how long the surge may
still last), plays the fleet forward in each as a fluid queue (producers at the measured pace, machines on the
way landing at their expected time, the new ones after a startup), and picks the launch count whose expected
machine dollars plus delay dollars is least. Only this run's launches are committed: the next run plans again
with what it then knows, so launching for demand beyond the window is left to later runs.

Why a launch is worth it is a newsvendor trade: a machine costs its price over the startup and the window
whatever happens; it saves waiting only in the scenarios that need it. A surge that is young is given a low
chance of outlasting a startup, so it buys a hedge rather than the whole crowd.

The surge's remaining life follows the Lindy rule (a Pareto tail, shape 1): having lasted `a`, it lasts beyond
`a + r` with probability a / (a + r). Nothing is fitted there; `level_spread_fraction` is (sim/world/fitted.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.decider.policy.config import PolicyConfig
from services.decider.policy.sizing import Sizing

STEP_S = 300.0  # the fluid model's step: five minutes against a startup of hours
# equal-probability bins of a surge's remaining life as multiples of its age: the Pareto(1) quantile
# r = a·q / (1 − q) at each bin's middle (q = 0.1, 0.3, 0.5, 0.7, 0.9)
SURGE_REMAINING_AGES = (1 / 9, 3 / 7, 1.0, 7 / 3, 9.0)
# the level's uncertainty as three points of a lognormal-like spread: low, as forecast, high
LEVEL_POINTS = ((-1.0, 0.25), (0.0, 0.5), (1.0, 0.25))


@dataclass(frozen=True)
class DemandScenario:
    name: str
    weight: float
    rates_per_h: np.ndarray  # arrivals per hour in each step of the horizon


@dataclass(frozen=True)
class MpcChoice:
    launches: int
    expected_usd: float  # expected machine + delay dollars over the horizon with `launches`
    hold_usd: float  # the same with no launch
    driver: str  # the scenario whose delay, with no launch, weighs most
    scenarios: int
    price_usd_per_h: float

    def describe(self) -> str:
        if self.launches == 0:
            return f"; expected cost ${self.hold_usd:.0f} over {self.scenarios} scenarios, no launch pays"
        return (
            f"; launch {self.launches}: expected ${self.expected_usd:.0f} against ${self.hold_usd:.0f} holding"
            f" over {self.scenarios} scenarios (worst without: {self.driver}) at ${self.price_usd_per_h:.2f}/h each"
        )


def horizon_steps(s: Sizing, config: PolicyConfig) -> int:
    return max(1, int(np.ceil((s.startup_s + config.planning_window_s) / STEP_S)))


def scenarios(s: Sizing, short_rate_per_h: float, config: PolicyConfig) -> list[DemandScenario]:
    """The demand paths over startup + planning window, weighted: the forecast ramp at three levels, and while a
    surge is on (arrivals above what the producers serve, not sustained), the surge ending at five moments."""
    steps = horizon_steps(s, config)
    t_s = (np.arange(steps) + 0.5) * STEP_S
    ramp_end_s = s.startup_s + config.planning_window_s / 2
    forecast = s.rate_now + (s.rate_up - s.rate_now) * np.minimum(1.0, t_s / ramp_end_s)
    served_before = min(s.rate_now, s.healthy * s.thr)
    surging = not s.planned_from_rate and short_rate_per_h > served_before and s.surge_s > 0
    paths: list[tuple[str, float, np.ndarray]] = []
    if surging:
        base = np.full(steps, served_before)
        for multiple in SURGE_REMAINING_AGES:
            remaining_s = s.surge_s * multiple
            path = np.where(t_s < remaining_s, short_rate_per_h, base)
            paths.append((f"surge ends in {remaining_s / 60:.0f} min", 1 / len(SURGE_REMAINING_AGES), path))
    else:
        paths.append(("forecast", 1.0, forecast))
    levels = LEVEL_POINTS if config.level_spread_fraction > 0 else ((0.0, 1.0),)
    out: list[DemandScenario] = []
    for name, weight, path in paths:
        for z, level_weight in levels:
            factor = float(np.exp(z * config.level_spread_fraction))
            label = name if z == 0 else f"{name}, ×{factor:.2f}"
            out.append(DemandScenario(label, weight * level_weight, path * factor))
    return out


def capacity_path(s: Sizing, config: PolicyConfig) -> np.ndarray:
    """Machines producing in each step without new launches: the healthy producers and those on the way."""
    steps = horizon_steps(s, config)
    starts_s = np.arange(steps) * STEP_S
    landed = np.searchsorted(np.asarray(s.offsets, dtype=float), starts_s, side="right")
    return s.healthy + landed.astype(float)


def expected_costs(
    s: Sizing, paths: list[DemandScenario], config: PolicyConfig, price_usd_per_h: float, max_launches: int
) -> tuple[np.ndarray, np.ndarray]:
    """Expected dollars for each launch count 0..max_launches, and each scenario's delay dollars holding.

    The queue is played forward per scenario and launch count at once (arrays of counts × scenarios); waiting
    that the fleet of the moment clears within the grace is free, as in the objective the world scores.
    """
    steps = horizon_steps(s, config)
    dt_h = STEP_S / 3600
    counts = np.arange(max_launches + 1, dtype=float)[:, None]
    landed_new = (np.arange(steps) * STEP_S >= s.startup_s).astype(float)
    machines = capacity_path(s, config)[None, :] + counts * landed_new[None, :]  # counts × steps
    rates = np.stack([p.rates_per_h for p in paths])  # scenarios × steps
    backlog = np.full((counts.shape[0], rates.shape[0]), float(s.pending))
    delay_task_h = np.zeros_like(backlog)
    grace_h = config.delay_grace_s / 3600
    for step in range(steps):
        served_per_h = machines[:, step][:, None] * s.thr
        backlog = np.maximum(0.0, backlog + (rates[None, :, step] - served_per_h) * dt_h)
        delay_task_h += np.maximum(0.0, backlog - served_per_h * grace_h) * dt_h
    # what is still queued at the horizon: drained by the fleet then, or waiting a startup for more machines
    end_served = machines[:, -1][:, None] * s.thr
    surplus = end_served - rates[None, :, -1]
    drain_h = np.where(surplus > 0, backlog / np.maximum(surplus, 1e-9) / 2, s.startup_s / 3600)
    delay_task_h += backlog * np.minimum(drain_h, s.startup_s / 3600)
    delay_usd = delay_task_h * config.delay_usd_per_task_h
    weights = np.array([p.weight for p in paths])
    machine_usd = counts[:, 0] * price_usd_per_h * steps * dt_h
    return machine_usd + delay_usd @ weights, delay_usd[0]


def choose_launches(s: Sizing, short_rate_per_h: float, config: PolicyConfig, price_usd_per_h: float) -> MpcChoice:
    """The launch count now with the least expected cost, searched up to what the busiest scenario needs."""
    paths = scenarios(s, short_rate_per_h, config)
    peak = max(float(p.rates_per_h.max()) for p in paths)
    backlog_machines = s.pending / (s.thr * max(config.planning_window_s / 3600, 1e-9))
    needed = int(np.ceil(peak / s.thr + backlog_machines)) - s.capacity
    max_launches = max(0, min(needed, config.max_launches_per_decision))
    totals, hold_delay = expected_costs(s, paths, config, price_usd_per_h, max_launches)
    best = int(np.argmin(totals))
    driver = paths[int(np.argmax(hold_delay))].name
    return MpcChoice(best, float(totals[best]), float(totals[0]), driver, len(paths), price_usd_per_h)
