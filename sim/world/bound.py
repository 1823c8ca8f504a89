"""The clairvoyant: a proven lower bound on the objective any policy can reach on a trace, not a plan.

It knows every arrival and the fastest a machine can start. For any prices μ_j ≥ 0 (dollars per task started
in minute j), every policy's objective is at least

    B(μ) = Σ_tasks min_j [μ_j + delay charge if the task started in minute j]        (task part)
         + Σ_levels min over on/off schedules of Σ_on (π_level − μ_j)·Δ + π_min·s·(starts)   (capacity part)

Proof sketch (README, "clairvoyant"): write the fleet's producing throughput c(t) as a stack of unit levels.
Holding a level costs at least the cheapest offers' price per task/h (π, sorted); a level switched on was
paid a startup of at least s = the shortest startup, at the best price per task/h (billed from running: the
registration at that price and the disk through the startup); levels up to the initial
fleet start on for free, others only from s on. So cost − Σ_j μ_j·(capacity in minute j) ≥ capacity part,
and Σ_j μ_j·(capacity in j) ≥ Σ_j μ_j·(tasks started in j) ≥ task part − delay cost. Hence objective ≥ B(μ),
for every μ, whatever a policy does, fails or pays for. The μ used are the dual prices of a coarse linear
relaxation (sim/world/lp.py, HiGHS); a poor solve only makes the bound looser.

With vast's levers (`levers=True`: a policy may park machines and bid) the same bound holds with these changes,
each a cost no run can pay less than:
- prices: every hold is priced at the offer's min_bid + disk (no bid below min_bid is accepted; an outbid pause
  only removes capacity), so π and π_min come from min_bid.
- a third state per level, "parked": the levels just above the producing stack, as many as the throughput of
  machines alive, not producing, that have produced before (draining, parked, resuming, outbid). Each pays
  its disk: at least d = disk ÷ the fastest offer's tasks/h, per level and hour. on → parked is free.
  parked → on is such a machine producing again: vast bills it from running, through the worker's
  registration, at ≥ its min_bid: ρ = the cheapest min_bid per task/h × registration, per level.
- a fresh start (off → on): a machine that never produced, whatever pauses it had, still loads for the shortest
  startup, then bills the registration at ≥ min_bid, and its disk throughout (a bid created paused loads with
  its GPU unbilled): s = ρ + d × (shortest startup + registration), no earlier than before. When it starts
  producing under parked machines the stack shifts: as many levels go parked → on (ρ) as go off → parked
  (charged the rest of s). The cheapest schedule never takes off → parked (staying off and switching on later
  costs no more), so the minimum over schedules is the same without that move: a level is parked only after on.
Summing as above, cost − Σ_j μ_j·(capacity in j) ≥ the capacity part with these states, for every policy that
parks and bids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from sim.vast.economics import storage_usd_per_h
from sim.vast.scenario import Scenario
from sim.world import lp
from sim.world.model import Market, Offer, WorldConfig, initial_fleet_size, offers_from_scenario
from sim.world.objective import ObjectiveConfig
from sim.world.trace import Trace

# offers whose price per task/h is within this fraction of a tier's cheapest join it (rounded down: still a bound)
TIER_PRICE_STEP = 0.005
LP_MAX_STEPS = 600
LP_MIN_STEP_MIN = 5
LP_TIERS = 6


@dataclass(frozen=True)
class Tier:
    """Unit levels of throughput (tasks/h) that all cost at least `usd_per_task` per hour each."""

    width_tasks_per_h: float
    usd_per_task: float
    initial: bool
    machine_tasks_per_h: float  # mean reference throughput of its offers, to express levels as machines


@dataclass
class BoundProblem:
    arrivals_per_min: np.ndarray  # the trace, then zeros to the horizon
    trace_minutes: int
    horizon_min: int
    grace_min: float
    delay_usd_per_task_min: float
    tiers: list[Tier]
    first_new_minute: int  # no new machine produces earlier (shortest startup + registration)
    startup_usd_per_task_per_h: float  # π_min · shortest billed startup, per unit level
    initial_tasks_per_h: float
    # with levers: a parked level's hold (disk) per hour and the charge for producing again from parked; inf: no
    # parking (the on-demand world's bound has no such state)
    parked_usd_per_task_per_h: float = math.inf
    resume_usd_per_task_per_h: float = math.inf

    @property
    def usd_per_task_min(self) -> float:
        return min(tier.usd_per_task for tier in self.tiers) if self.tiers else 0.0


@dataclass
class BoundResult:
    objective_usd: float
    delay_cost_usd: float  # the task part's delay charges at its chosen minutes (a split of the bound)
    work_bound_usd: float  # the weakest form: every task at the cheapest price per task, no startup, no wait
    lp_objective_usd: float
    lp_iterations: int
    lp_converged: bool
    lp_step_min: int
    plan_tasks_per_h: np.ndarray  # the relaxation's producing throughput per LP step (for plots)
    plan_machines: np.ndarray
    plan_spend_usd_per_h: np.ndarray
    plan_launches: float
    plan_machine_hours: float
    prices_usd_per_task: np.ndarray = field(repr=False)
    wall_s: float = 0.0

    @property
    def cost_usd(self) -> float:
        return self.objective_usd - self.delay_cost_usd


def build_problem(
    trace: Trace, scenario: Scenario, world: WorldConfig, objective: ObjectiveConfig, levers: bool = False
) -> BoundProblem:
    """The bound's data. `levers`: every policy may also park and bid (the module docstring's three changes)."""
    market = Market(offers_from_scenario(scenario))
    n_initial = initial_fleet_size(market, trace.arrivals_per_min, world)
    # a machine's disk is billed beside its GPU in every state (the same for every offer, so the order holds)
    disk_usd_per_h = storage_usd_per_h(scenario.billing.storage_usd_per_gb_month, world.disk_gb)
    # the least an offer's GPU can be billed an hour: on-demand, or with bids the min_bid no lower bid goes under
    gpu_share = scenario.bids.min_bid_share if levers else 1.0

    def hold_usd_per_task(offer: Offer) -> float:
        return (offer.price_usd_per_h * gpu_share + disk_usd_per_h) / offer.tasks_per_h

    tiers: list[Tier] = []
    # the market rents by the catalog's pace; work is priced at each machine's real pace, cheapest first within
    # the initial fleet and within the rest
    by_real_price = sorted(market.offers[:n_initial], key=hold_usd_per_task) + sorted(
        market.offers[n_initial:], key=hold_usd_per_task
    )
    for i, offer in enumerate(by_real_price):
        initial = i < n_initial
        price, rate = hold_usd_per_task(offer), offer.tasks_per_h
        last = tiers[-1] if tiers else None
        if last and last.initial == initial and price <= last.usd_per_task * (1 + TIER_PRICE_STEP):
            width = last.width_tasks_per_h + rate
            machines = last.width_tasks_per_h / last.machine_tasks_per_h + 1
            tiers[-1] = Tier(width, last.usd_per_task, initial, width / machines)
        else:
            tiers.append(Tier(rate, price, initial, rate))
    startup = scenario.startup.startup_s.min
    registration_h = world.registration_s / 3600.0
    horizon_min = trace.minutes + math.ceil(world.drain_max_s / 60)
    arrivals = np.zeros(horizon_min)
    arrivals[: trace.minutes] = trace.arrivals_per_min
    usd_per_task_min = min((t.usd_per_task for t in tiers), default=0.0)
    # the least disk per task/h any machine pays: a parked level's hold, and a startup's disk
    disk_usd_per_task = disk_usd_per_h / max((o.tasks_per_h for o in market.offers), default=1.0)
    parked = resume = math.inf
    if levers:
        gpu_min = min((o.price_usd_per_h * gpu_share / o.tasks_per_h for o in market.offers), default=0.0)
        parked = disk_usd_per_task
        resume = gpu_min * registration_h
        # a bid created paused loads unbilled: only the registration's GPU and the disk all along are sure
        startup_charge = resume + disk_usd_per_task * (startup + world.registration_s) / 3600.0
    elif world.billed_from == "created":
        startup_charge = usd_per_task_min * (startup + world.registration_s) / 3600.0
    else:
        # the GPU from running, through the registration; the disk from creation
        startup_charge = usd_per_task_min * registration_h + disk_usd_per_task * startup / 3600.0
    return BoundProblem(
        arrivals_per_min=arrivals,
        trace_minutes=trace.minutes,
        horizon_min=horizon_min,
        grace_min=objective.grace_min,
        delay_usd_per_task_min=objective.delay_usd_per_task_h / 60.0,
        tiers=tiers,
        first_new_minute=int((startup + world.registration_s) // 60),
        startup_usd_per_task_per_h=startup_charge,
        initial_tasks_per_h=sum(t.width_tasks_per_h for t in tiers if t.initial),
        parked_usd_per_task_per_h=parked,
        resume_usd_per_task_per_h=resume,
    )


# --- B(μ), exactly, minute by minute -------------------------------------------------------------------------


def task_part(problem: BoundProblem, prices: np.ndarray) -> tuple[float, float]:
    """Σ_tasks of the cheapest (price + delay charge) over the minutes it could start, or never; and the delay."""
    h, delta = problem.horizon_min, problem.delay_usd_per_task_min
    n = problem.arrivals_per_min[: problem.trace_minutes]
    m = np.arange(problem.trace_minutes)
    # a task of minute m waits at least (j − m − 1) minutes if it starts in minute j; free until the grace
    free_until = m + 1 + problem.grace_min
    width = math.floor(1 + problem.grace_min) + 1  # minutes m .. floor(m + 1 + grace)
    padded = np.concatenate([prices, np.full(width, np.inf)])
    window = sliding_window_view(padded, width)[: problem.trace_minutes]
    in_grace = window.min(axis=1)
    # later: min over i ≥ j of prices[i] + delta·(i − j), from a suffix minimum of prices[i] + delta·i
    keyed = prices + delta * np.arange(h)
    suffix_min = np.minimum.accumulate(keyed[::-1])[::-1]
    suffix_min = np.append(suffix_min, np.inf)
    first_late = np.minimum(m + width, h)
    late = suffix_min[first_late] - delta * free_until
    never = delta * np.maximum(0.0, h - free_until)
    best = np.minimum(np.minimum(in_grace, late), never)
    # the delay share of each choice: zero in the grace; for a late start, best minus the price it pays there
    late_wins = (late < in_grace) & (late <= never)
    never_wins = (never < in_grace) & (never < late)
    suffix_arg = _suffix_argmin(keyed)
    late_minute = suffix_arg[np.minimum(first_late, h - 1)]
    late_delay = np.where(late_wins, best - prices[late_minute], 0.0)
    delay = np.where(never_wins, never, late_delay)
    return float(n @ best), float(n @ delay)


def _suffix_argmin(values: np.ndarray) -> np.ndarray:
    reversed_values = values[::-1]
    running = np.minimum.accumulate(reversed_values)
    positions = np.where(reversed_values == running, np.arange(len(values)), 0)
    latest = np.maximum.accumulate(positions)
    return (len(values) - 1 - latest)[::-1]


def capacity_part(problem: BoundProblem, prices: np.ndarray) -> float:
    """Σ over unit levels of the cheapest on/parked/off schedule, at (holding price − μ) per minute on."""
    if not problem.tiers:
        return 0.0
    hold = np.array([t.usd_per_task for t in problem.tiers])
    widths = np.array([t.width_tasks_per_h for t in problem.tiers])
    step_h = 1.0 / 60.0
    start = problem.startup_usd_per_task_per_h
    resume = problem.resume_usd_per_task_per_h
    parked_step = problem.parked_usd_per_task_per_h * step_h  # inf without levers: the state is never reached
    # each is the cheapest schedule so far that ends the previous minute in that state
    on = np.where([t.initial for t in problem.tiers], 0.0, np.inf)
    off = np.zeros(len(hold))
    parked = np.full(len(hold), np.inf)  # only a level that was on can be parked
    costs = (hold[None, :] - prices[:, None]) * step_h
    first_new = problem.first_new_minute
    for j in range(problem.horizon_min):
        entering = np.minimum(on, parked + resume)
        if j >= first_new:
            entering = np.minimum(entering, off + start)
        off = np.minimum(np.minimum(off, on), parked)
        parked = np.minimum(parked, on) + parked_step
        on = costs[j] + entering
    return float(widths @ np.minimum(np.minimum(on, off), parked))


def bound_value(problem: BoundProblem, prices: np.ndarray) -> tuple[float, float]:
    prices = np.maximum(prices, 0.0)
    tasks, delay = task_part(problem, prices)
    return tasks + capacity_part(problem, prices), delay


# --- the prices, from a coarse linear relaxation ---------------------------------------------------------------


@dataclass
class Relaxation:
    lp: lp.LinearProgram
    step_min: int
    steps: int
    tiers: list[Tier]
    fields: int
    tasks_scale: float
    objective_scale: float
    throughput_scale: float


def _lp_tiers(tiers: list[Tier]) -> list[Tier]:
    """At most LP_TIERS groups (each priced at its cheapest member): enough to steer the prices."""
    initial = [t for t in tiers if t.initial]
    rest = [t for t in tiers if not t.initial]
    groups: list[Tier] = []
    for members in (initial, rest):
        if not members:
            continue
        per_group = max(1, math.ceil(len(members) / (LP_TIERS // 2)))
        for i in range(0, len(members), per_group):
            chunk = members[i : i + per_group]
            width = sum(t.width_tasks_per_h for t in chunk)
            machines = sum(t.width_tasks_per_h / t.machine_tasks_per_h for t in chunk)
            groups.append(Tier(width, chunk[0].usd_per_task, chunk[0].initial, width / machines))
    return groups


def _arrived_by(problem: BoundProblem, cumulative: np.ndarray, minute: float) -> float:
    if minute <= 0:
        return 0.0
    whole = min(int(minute), problem.horizon_min)
    frac = minute - whole if whole < problem.horizon_min else 0.0
    return float(cumulative[whole] + (problem.arrivals_per_min[whole] * frac if frac else 0.0))


def relaxation_problem(problem: BoundProblem) -> Relaxation:
    step_min = max(LP_MIN_STEP_MIN, math.ceil(problem.horizon_min / LP_MAX_STEPS))
    steps = math.ceil(problem.horizon_min / step_min)
    step_h = step_min / 60.0
    tiers = _lp_tiers(problem.tiers)
    nt = len(tiers)
    fields = nt + 6  # c per tier, u, S, e, three slacks
    cumulative = np.concatenate([[0.0], np.cumsum(problem.arrivals_per_min)])
    per_step = np.add.reduceat(np.append(problem.arrivals_per_min, np.zeros(steps * step_min - problem.horizon_min)),
                               np.arange(0, steps * step_min, step_min))  # fmt: skip
    throughput_scale = max(1.0, float(per_step.max()) / step_h)
    tasks_scale = throughput_scale * step_h
    price_min = problem.usd_per_task_min or 1.0
    objective_scale = price_min * step_h * throughput_scale
    n = steps * fields
    c = np.zeros(n)
    ub = np.full(n, np.inf)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    b = np.zeros(3 * steps)

    def put(row: int, col: int, val: float) -> None:
        rows.append(row)
        cols.append(col)
        vals.append(val)

    startup_cost = problem.startup_usd_per_task_per_h * throughput_scale / objective_scale
    lateness_cost = problem.delay_usd_per_task_min * 60.0 * step_h * tasks_scale / objective_scale
    for k in range(steps):
        base = k * fields
        u, s, e, s1, s2, s4 = (base + nt + i for i in range(6))
        r1, r2, r4 = 3 * k, 3 * k + 1, 3 * k + 2
        early = (k + 1) * step_min <= problem.first_new_minute
        for t, tier in enumerate(tiers):
            col = base + t
            c[col] = tier.usd_per_task * step_h * throughput_scale / objective_scale
            ub[col] = 0.0 if early and not tier.initial else tier.width_tasks_per_h / throughput_scale
            put(r1, col, -1.0)
            put(r2, col, 1.0)
            if k + 1 < steps:
                put(r1 + 3, col, 1.0)
        c[u] = startup_cost
        put(r1, u, 1.0)
        put(r1, s1, -1.0)
        put(r2, s, -1.0)
        if k + 1 < steps:
            put(r2 + 3, s, 1.0)
        put(r2, s2, -1.0)
        ub[s] = _arrived_by(problem, cumulative, (k + 1) * step_min) / tasks_scale
        c[e] = lateness_cost
        put(r4, e, 1.0)
        put(r4, s, 1.0)
        put(r4, s4, -1.0)
        b[r4] = _arrived_by(problem, cumulative, k * step_min - problem.grace_min) / tasks_scale
    b[0] = -problem.initial_tasks_per_h / throughput_scale
    problem_lp = lp.LinearProgram(c, np.array(rows), np.array(cols), np.array(vals), b, ub)
    return Relaxation(problem_lp, step_min, steps, tiers, fields, tasks_scale, objective_scale, throughput_scale)


def bound_from_duals(
    problem: BoundProblem, relaxation: Relaxation, solution: lp.LPSolution
) -> tuple[float, float, np.ndarray]:
    """The best B(μ) (and its delay share, and μ) over a few scalings of the relaxation's task-row duals."""
    duals = solution.y[1::3] * relaxation.objective_scale / relaxation.tasks_scale
    prices = np.repeat(np.maximum(duals, 0.0), relaxation.step_min)[: problem.horizon_min]
    best: tuple[float, float, np.ndarray] = (-math.inf, 0.0, prices)
    for scale in (1.0, 0.98, 0.95, 0.9):
        value, delay = bound_value(problem, prices * scale)
        if value > best[0]:
            best = (value, delay, prices * scale)
    return best


def clairvoyant_bound(
    trace: Trace,
    scenario: Scenario | None = None,
    world: WorldConfig | None = None,
    objective: ObjectiveConfig | None = None,
    levers: bool = False,
) -> BoundResult:
    """The bound for every policy of the on-demand world, or with `levers` for every policy that may also park
    and bid (lower, as those policies may pay less)."""
    import time

    wall_start = time.perf_counter()
    problem = build_problem(
        trace, scenario or Scenario(), world or WorldConfig(), objective or ObjectiveConfig(), levers
    )
    work_prices = np.full(problem.horizon_min, problem.usd_per_task_min)
    work_bound, _ = bound_value(problem, work_prices)
    relaxation = relaxation_problem(problem)
    solution = lp.solve(relaxation.lp)
    best, best_delay, best_prices = work_bound, 0.0, work_prices
    value, delay, prices = bound_from_duals(problem, relaxation, solution)
    if value > best:
        best, best_delay, best_prices = value, delay, prices
    fields, nt = relaxation.fields, len(relaxation.tiers)
    x = solution.x.reshape(relaxation.steps, fields)
    plan = x[:, :nt] * relaxation.throughput_scale
    machines = (plan / np.array([t.machine_tasks_per_h for t in relaxation.tiers])).sum(axis=1)
    launches = float(np.sum(np.maximum(0.0, np.diff(np.concatenate([[machines[0]], machines])))))
    return BoundResult(
        objective_usd=best,
        delay_cost_usd=best_delay,
        work_bound_usd=work_bound,
        lp_objective_usd=solution.primal_objective * relaxation.objective_scale,
        lp_iterations=solution.iterations,
        lp_converged=solution.converged,
        lp_step_min=relaxation.step_min,
        plan_tasks_per_h=plan.sum(axis=1),
        plan_machines=machines,
        plan_spend_usd_per_h=plan @ np.array([t.usd_per_task for t in relaxation.tiers]),
        plan_launches=launches,
        plan_machine_hours=float(machines.sum() * relaxation.step_min / 60.0),
        prices_usd_per_task=best_prices,
        wall_s=time.perf_counter() - wall_start,
    )
