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
Plain Python: a decision is a few thousand steps of arithmetic, and the services carry no numerical library.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass

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
    rates_per_h: tuple[float, ...]  # arrivals per hour in each step of the horizon


@dataclass(frozen=True)
class MpcChoice:
    launches: int
    expected_usd: float  # expected machine + delay dollars over the horizon with `launches`
    hold_usd: float  # the same with no launch
    driver: str  # the scenario whose delay, with no launch, weighs most
    scenarios: int
    price_usd_per_h: float

    def describe(self) -> str:
        # one scenario is the forecast itself: "over 1 scenarios (worst without: forecast)" told an operator nothing
        over = "on the forecast" if self.scenarios == 1 else f"over {self.scenarios} scenarios"
        if self.launches == 0:
            return f"; expected cost ${self.hold_usd:.0f} {over}, no launch pays"
        worst = "" if self.scenarios == 1 else f" (worst without: {self.driver})"
        return (
            f"; launch {self.launches}: expected ${self.expected_usd:.0f} against ${self.hold_usd:.0f} holding"
            f" {over}{worst} at ${self.price_usd_per_h:.2f}/h each"
        )


def horizon_steps(s: Sizing, config: PolicyConfig) -> int:
    return max(1, math.ceil((s.startup_s + config.planning_window_s) / STEP_S))


def scenarios(s: Sizing, short_rate_per_h: float, config: PolicyConfig, lost_machines: int = 0) -> list[DemandScenario]:
    """The demand paths over startup + planning window, weighted: the forecast ramp (at three levels when the
    level's spread is set), or while a surge is on (the shortest window's arrivals above the longer run's, not yet
    sustained), the surge ending at five moments."""
    t_s = [(step + 0.5) * STEP_S for step in range(horizon_steps(s, config))]
    ramp_end_s = s.startup_s + config.planning_window_s / 2
    # after a surge, arrivals fall back to what the producers served before it, the machines just lost (failed,
    # stalled, outbid) counted: a fleet that lost machines faces the same arrivals, not a surge
    settled = min(s.rate_now, (s.healthy + lost_machines) * s.thr)
    surging = not s.planned_from_rate and short_rate_per_h > settled and s.surge_s > 0
    paths: list[tuple[str, float, list[float]]] = []
    if surging:
        for multiple in SURGE_REMAINING_AGES:
            remaining_s = s.surge_s * multiple
            path = [short_rate_per_h if t < remaining_s else settled for t in t_s]
            paths.append((f"surge ends in {remaining_s / 60:.0f} min", 1 / len(SURGE_REMAINING_AGES), path))
    else:
        forecast = [s.rate_now + (s.rate_up - s.rate_now) * min(1.0, t / ramp_end_s) for t in t_s]
        paths.append(("forecast", 1.0, forecast))
    levels = LEVEL_POINTS if config.level_spread_fraction > 0 else ((0.0, 1.0),)
    out: list[DemandScenario] = []
    for name, weight, path in paths:
        for z, level_weight in levels:
            factor = math.exp(z * config.level_spread_fraction)
            label = name if z == 0 else f"{name}, ×{factor:.2f}"
            out.append(DemandScenario(label, weight * level_weight, tuple(rate * factor for rate in path)))
    return out


def capacity_path(s: Sizing, config: PolicyConfig, kept: int | None = None) -> list[float]:
    """Machines producing in each step without new launches, in multiples of `s.thr`: the healthy producers and
    those on the way, each at its own pace (`kept`: only the first that many to land; default all of them)."""
    return capacity_paths(s, config)(kept)


def capacity_paths(s: Sizing, config: PolicyConfig) -> Callable[[int | None], list[float]]:
    """`capacity_path` for any `kept`, with what every count shares (how many have landed by each step, their
    paces added up) worked out once: the kept-machines search asks for one path per count."""
    cumulative = [0.0]
    for weight in s.arriving_weights:  # in `s.offsets` order, sorted by offset (sizing)
        cumulative.append(cumulative[-1] + weight)
    landed = [bisect.bisect_right(s.offsets, step * STEP_S) for step in range(horizon_steps(s, config))]

    def path(kept: int | None = None) -> list[float]:
        limit = len(s.offsets) if kept is None else max(0, min(kept, len(s.offsets)))
        healthy = s.healthy
        return [healthy + cumulative[count if count < limit else limit] for count in landed]

    return path


def scenario_delay_usd(s: Sizing, rates: tuple[float, ...], machines: list[float], config: PolicyConfig) -> float:
    """Delay dollars of one scenario with the fleet `machines` per step: the queue played forward as a fluid;
    waiting that the fleet of the moment clears within the grace is free, as in the objective the world scores.
    What is still queued at the horizon is drained by the fleet then, or waits a startup for more machines."""
    dt_h, grace_h, startup_h = STEP_S / 3600, config.delay_grace_s / 3600, s.startup_s / 3600
    thr = s.thr
    backlog, task_h = float(s.pending), 0.0
    # the hottest loop of a decision (every scenario × every launch count × every step): comparisons rather than
    # max() calls, the same arithmetic
    for rate, count in zip(rates, machines, strict=True):
        served_per_h = count * thr
        backlog += (rate - served_per_h) * dt_h
        if not backlog > 0.0:
            backlog = 0.0
        waiting = backlog - served_per_h * grace_h
        if waiting > 0.0:
            task_h += waiting * dt_h
    surplus = machines[-1] * thr - rates[-1]
    task_h += backlog * (min(backlog / surplus / 2, startup_h) if surplus > 0 else startup_h)
    return task_h * config.delay_usd_per_task_h


def expected_usd(
    s: Sizing,
    paths: list[DemandScenario],
    base: list[float],
    config: PolicyConfig,
    price_usd_per_h: float,
    launches: int,
) -> float:
    """Machine dollars of `launches` new machines over the horizon plus the scenarios' weighted delay dollars;
    `base` is capacity_path(s, config), computed once per decision by the caller."""
    machines = [count + (launches if step * STEP_S >= s.startup_s else 0) for step, count in enumerate(base)]
    delay = sum(p.weight * scenario_delay_usd(s, p.rates_per_h, machines, config) for p in paths)
    return launches * price_usd_per_h * len(base) * STEP_S / 3600 + delay


def on_the_way_kept(
    s: Sizing,
    short_rate_per_h: float,
    config: PolicyConfig,
    price_usd_per_h: float,
    lost_machines: int = 0,
) -> int:
    """How many machines on the way the expected cost keeps: the last to land is given back while its price over
    the horizon weighs more than the delay the scenarios charge without it. The launch choice's trade run
    backwards, so that the two cannot contradict each other (the busy demo launched two machines by expected cost
    and the scale-down rule gave them back twelve minutes later)."""
    paths = scenarios(s, short_rate_per_h, config, lost_machines)
    on_the_way = len(s.offsets)
    horizon_h = horizon_steps(s, config) * STEP_S / 3600

    paths_for = capacity_paths(s, config)

    def usd(kept: int) -> float:
        machines = paths_for(kept)
        delay = sum(p.weight * scenario_delay_usd(s, p.rates_per_h, machines, config) for p in paths)
        return kept * price_usd_per_h * horizon_h + delay

    best, best_usd = on_the_way, usd(on_the_way)
    # walked down one machine at a time to the first rise: the cost is nearly, not always, convex in the count (a
    # bisection found another minimum in 5 of 10,248 decisions on random-walk selection seeds 105-106)
    for kept in range(on_the_way - 1, -1, -1):
        cost = usd(kept)
        if cost >= best_usd:
            break
        best, best_usd = kept, cost
    return best


def choose_launches(
    s: Sizing,
    short_rate_per_h: float,
    config: PolicyConfig,
    price_usd_per_h: float,
    lost_machines: int = 0,
) -> MpcChoice:
    """The launch count now with the least expected cost, up to `max_launches_per_decision`. The expected cost
    is convex in the count (machine dollars grow linearly, each scenario's fluid delay shrinks ever less), so the
    search stops where it first rises. (A cap at what the busiest scenario's rate needs stopped short of the
    backlog that builds while machines start.)"""
    paths = scenarios(s, short_rate_per_h, config, lost_machines)
    base = capacity_path(s, config)
    hold = expected_usd(s, paths, base, config, price_usd_per_h, 0)
    best, best_usd = 0, hold
    for launches in range(1, config.max_launches_per_decision + 1):
        usd = expected_usd(s, paths, base, config, price_usd_per_h, launches)
        if usd >= best_usd:
            break
        best, best_usd = launches, usd
    driver = max(paths, key=lambda p: scenario_delay_usd(s, p.rates_per_h, base, config)).name
    return MpcChoice(best, best_usd, hold, driver, len(paths), price_usd_per_h)
