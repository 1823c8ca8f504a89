"""A tighter clairvoyant lower bound: whole machines, solved as a mixed-integer program by HiGHS.

The minute-by-minute bound (bound.py) prices throughput as a fluid: a trace that needs a tenth of a machine pays a
tenth of one. A real fleet rents whole machines, and a machine used for part of each quarter hour was started
again each time. This bound keeps the clairvoyant's knowledge of every arrival and counts machines:

Time is cut into steps of Δ minutes. Offers are grouped (by GPU model, then by price); for group g in step k

    y[k,g] ∈ ℤ  machines producing at some moment of the step        (≤ the group's offers)
    f[k,g] ∈ ℤ  machines producing throughout the step               (≤ y[k,g])
    h[k,g] ≥ 0  machine-hours produced                               (Δ·f ≤ h ≤ Δ·y)
    q[k,g] ≥ 0  tasks of capacity produced                           (≤ the fastest member's pace · h)
    w[k,g] ≥ 0  machine dollars      (≥ the cheapest price · h, and ≥ the cheapest price per task · q)
    z[k,g] ≥ 0  production starts (a fresh machine's first, or a resume)

A machine producing at some moment of step k that did not produce throughout step k−1 began producing in step k−1
or k, so z[k−1] + z[k] ≥ y[k] − f[k−1] (before the first step, the initial fleet produces throughout). Tasks:
S_j (started by the end of minute j) ≤ arrived by then, and the tasks started in step k ≤ Σ_g q[k,g]. Delay: a
task waits past its grace while it has arrived more than the grace ago and has not started, so the delay
dollars are at least Σ_j δ·max(0, A(j − grace) − S_j), minute by minute as bound.py counts them.

Each term is a cost no run can pay less than (same facts as bound.py's docstring): a machine-hour producing costs
at least the group's cheapest price + disk (with levers: min_bid + disk); a production start costs the startup
charge (on-demand: the whole startup at the group's cheapest price per task/h; with levers, a resume's
registration at min_bid, and once per machine ever started the disk through the shortest startup). No new machine
produces before the shortest startup + registration. The instance cap, failures, slow machines and waits are left
out: each only costs a run more. So every policy's objective ≥ the program's optimum ≥ HiGHS' dual bound, which is
what is reported: valid even when the solve stops at its time limit.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from sim.vast.economics import storage_usd_per_h
from sim.vast.scenario import Scenario
from sim.world.model import Market, Offer, WorldConfig, initial_fleet_size, offers_from_scenario
from sim.world.objective import ObjectiveConfig
from sim.world.trace import Trace

# steps of at least this many minutes, and at most this many steps: the program's size (and HiGHS' time) grows
# with both; a shorter step forces more starts on a machine used in bursts, so it only tightens
STEP_MIN_MINUTES = 15
MAX_STEPS = 400
# price bands per GPU model: offers in one band are priced at its cheapest and produce at most at its fastest
BANDS_PER_MODEL = 2
TIME_LIMIT_S = 30.0
MIP_REL_GAP = 0.01


@dataclass(frozen=True)
class MachineGroup:
    machines: int
    initial: int  # of them producing at t=0
    usd_per_machine_h: float  # the cheapest member's price (or min_bid) + disk
    usd_per_task: float  # the least (price or min_bid + disk) ÷ pace of a member: an hour's cost per task of capacity
    tasks_per_h_max: float  # the fastest member's pace
    start_usd: float  # a production start's least charge
    fresh_usd: float  # with levers: charged once per machine ever started beyond the initial ones


@dataclass
class IntegerBoundResult:
    objective_usd: float  # HiGHS' dual bound: a lower bound on every policy's objective
    primal_usd: float  # the best integer plan found (≥ the bound; equal when solved to the gap)
    gap: float
    solved: bool  # True: optimal within MIP_REL_GAP; False: stopped at the time limit (the bound still holds)
    step_min: int
    groups: int
    wall_s: float
    # the best integer plan's dollars, split (machine hours, production starts, delay): where the bound's money is
    plan_machine_usd: float = math.nan
    plan_start_usd: float = math.nan
    plan_delay_usd: float = math.nan
    plan_peak_machines: int = 0


def _groups(trace: Trace, scenario: Scenario, world: WorldConfig, levers: bool) -> tuple[list[MachineGroup], int]:
    market = Market(offers_from_scenario(scenario))
    n_initial = initial_fleet_size(market, trace.arrivals_per_min, world)
    disk = storage_usd_per_h(scenario.billing.storage_usd_per_gb_month, world.disk_gb)
    share = scenario.bids.min_bid_share if levers else 1.0
    startup_h = scenario.startup.startup_s.min / 3600.0
    registration_h = world.registration_s / 3600.0
    by_model: dict[tuple[str, bool], list[Offer]] = defaultdict(list)
    for i, offer in enumerate(market.offers):
        by_model[(offer.gpu_model, i < n_initial)].append(offer)
    groups: list[MachineGroup] = []
    for (_, initial), offers in sorted(by_model.items()):
        offers.sort(key=lambda o: (o.price_usd_per_h * share + disk) / o.tasks_per_h)
        per_band = math.ceil(len(offers) / BANDS_PER_MODEL)
        for start in range(0, len(offers), per_band):
            band = offers[start : start + per_band]
            gpu_h = min(o.price_usd_per_h for o in band) * share
            if levers:
                # a bid created paused loads unbilled: a resume's registration at min_bid is what every start
                # pays, and the disk through loading once per machine
                start_usd, fresh_usd = gpu_h * registration_h, disk * (startup_h + registration_h)
            elif world.billed_from == "created":
                start_usd, fresh_usd = (gpu_h + disk) * (startup_h + registration_h), 0.0
            else:
                start_usd, fresh_usd = gpu_h * registration_h + disk * (startup_h + registration_h), 0.0
            groups.append(
                MachineGroup(
                    machines=len(band),
                    initial=len(band) if initial else 0,
                    usd_per_machine_h=gpu_h + disk,
                    usd_per_task=min((o.price_usd_per_h * share + disk) / o.tasks_per_h for o in band),
                    tasks_per_h_max=max(o.tasks_per_h for o in band),
                    start_usd=start_usd,
                    fresh_usd=fresh_usd,
                )
            )
    first_new_min = int((scenario.startup.startup_s.min + world.registration_s) // 60)
    return groups, first_new_min


def integer_bound(
    trace: Trace,
    scenario: Scenario | None = None,
    world: WorldConfig | None = None,
    objective: ObjectiveConfig | None = None,
    levers: bool = False,
    time_limit_s: float = TIME_LIMIT_S,
) -> IntegerBoundResult:
    wall_start = time.perf_counter()
    scenario, world, objective = scenario or Scenario(), world or WorldConfig(), objective or ObjectiveConfig()
    groups, first_new_min = _groups(trace, scenario, world, levers)
    horizon_min = trace.minutes + math.ceil(world.drain_max_s / 60)
    step = max(STEP_MIN_MINUTES, math.ceil(horizon_min / MAX_STEPS))
    steps = math.ceil(horizon_min / step)
    step_h = step / 60.0
    arrivals = np.zeros(steps * step + 1)
    arrivals[1 : trace.minutes + 1] = np.cumsum(trace.arrivals_per_min)
    arrivals[trace.minutes + 1 :] = arrivals[trace.minutes]

    def arrived_by(minute: float) -> float:
        return float(arrivals[int(min(max(minute, 0.0), steps * step))])

    n_groups = len(groups)
    # columns: per step, per group (y, f, h, z); per group the machines ever started (levers); then per minute the
    # tasks started by its end (S) and the tasks late in it (e): the task side minute by minute, as bound.py prices
    # it, and the machines per step (their production within a step may fall anywhere in it)
    per_group = 6
    fresh_col0 = steps * n_groups * per_group
    minutes = steps * step
    s_col0 = fresh_col0 + n_groups
    e_col0 = s_col0 + minutes
    n = e_col0 + minutes

    def col(k: int, g: int, field: int) -> int:
        return (k * n_groups + g) * per_group + field

    Y, F, H, Z, Q, W = range(per_group)
    c = np.zeros(n)
    lower = np.zeros(n)
    upper = np.full(n, np.inf)
    integrality = np.zeros(n)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    row_lo: list[float] = []
    row_hi: list[float] = []

    def add_row(terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(row_lo)
        for column, value in terms:
            rows.append(r)
            cols.append(column)
            vals.append(value)
        row_lo.append(lo)
        row_hi.append(hi)

    for k in range(steps):
        early = (k + 1) * step <= first_new_min
        capacity: list[tuple[int, float]] = []
        for g, group in enumerate(groups):
            y, f, h, z, q, w = (col(k, g, x) for x in (Y, F, H, Z, Q, W))
            integrality[y] = integrality[f] = 1
            upper[y] = group.initial if early else group.machines
            upper[f] = upper[y]
            c[w] = 1.0
            c[z] = group.start_usd
            # the step's machine dollars: at least its hours at the cheapest price and its production at the
            # cheapest price per task (a band's members differ in both)
            add_row([(w, 1.0), (h, -group.usd_per_machine_h)], 0.0, np.inf)
            add_row([(w, 1.0), (q, -group.usd_per_task)], 0.0, np.inf)
            add_row([(q, 1.0), (h, -group.tasks_per_h_max)], -np.inf, 0.0)  # q ≤ fastest pace · h
            add_row([(f, 1.0), (y, -1.0)], -np.inf, 0.0)  # f ≤ y
            add_row([(h, 1.0), (f, -step_h)], 0.0, np.inf)  # h ≥ Δ·f
            add_row([(h, 1.0), (y, -step_h)], -np.inf, 0.0)  # h ≤ Δ·y
            # starts: z[k−1] + z[k] ≥ y[k] − f[k−1]; before step 0 the initial fleet produced throughout
            if k == 0:
                add_row([(z, 1.0), (y, -1.0)], -float(group.initial), np.inf)
            else:
                add_row([(z, 1.0), (col(k - 1, g, Z), 1.0), (y, -1.0), (col(k - 1, g, F), 1.0)], 0.0, np.inf)
            if levers:
                add_row([(fresh_col0 + g, 1.0), (y, -1.0)], -float(group.initial), np.inf)  # ever started ≥ y − initial
            capacity.append((q, -1.0))
        # the tasks started in the step ≤ what its machines produced
        end, before = s_col0 + (k + 1) * step - 1, s_col0 + k * step - 1
        add_row([(end, 1.0), *([(before, -1.0)] if k else []), *capacity], -np.inf, 0.0)
        # and within it, no faster than the machines present at their fastest pace: from the step's start to each
        # minute, and from each minute to its end (else a step's production could all serve its first minute)
        for m in range(step - 1):
            minute = s_col0 + k * step + m
            pace_so_far = [(col(k, g, Y), -group.tasks_per_h_max * (m + 1) / 60.0) for g, group in enumerate(groups)]
            add_row([(minute, 1.0), *([(before, -1.0)] if k else []), *pace_so_far], -np.inf, 0.0)
            pace_left = [
                (col(k, g, Y), -group.tasks_per_h_max * (step - m - 1) / 60.0) for g, group in enumerate(groups)
            ]
            add_row([(end, 1.0), (minute, -1.0), *pace_left], -np.inf, 0.0)
    for g, group in enumerate(groups):
        c[fresh_col0 + g] = group.fresh_usd
        upper[fresh_col0 + g] = group.machines if levers else 0.0
    delay_per_task_min = objective.delay_usd_per_task_h / 60.0
    for j in range(minutes):
        s, e = s_col0 + j, e_col0 + j
        upper[s] = arrived_by(j + 1)  # started by the end of minute j: arrived by then
        if j:
            add_row([(s, 1.0), (s - 1, -1.0)], 0.0, np.inf)  # S grows
        # late in minute j: arrived before j − grace (the grace counted from the minute after arrival, as bound.py)
        c[e] = delay_per_task_min
        add_row([(e, 1.0), (s, 1.0)], arrived_by(j - objective.grace_min), np.inf)
    matrix = coo_array((vals, (rows, cols)), shape=(len(row_lo), n)).tocsr()
    result = milp(
        c,
        constraints=LinearConstraint(matrix, np.array(row_lo), np.array(row_hi)),
        integrality=integrality,
        bounds=Bounds(lower, upper),
        options={"time_limit": time_limit_s, "mip_rel_gap": MIP_REL_GAP, "disp": False},
    )
    dual = getattr(result, "mip_dual_bound", None)
    primal = float(result.fun) if result.fun is not None else math.inf
    bound = float(dual) if dual is not None and np.isfinite(dual) else (primal if result.status == 0 else 0.0)
    result_bound = IntegerBoundResult(
        objective_usd=max(0.0, bound),
        primal_usd=primal,
        gap=float(getattr(result, "mip_gap", math.nan) or 0.0),
        solved=result.status == 0,
        step_min=step,
        groups=n_groups,
        wall_s=time.perf_counter() - wall_start,
    )
    if result.x is not None:
        x = result.x
        group_cols = x[:fresh_col0].reshape(steps, n_groups, per_group)
        start_costs = c[:fresh_col0].reshape(steps, n_groups, per_group)[:, :, Z]
        result_bound.plan_machine_usd = float(group_cols[:, :, W].sum())
        result_bound.plan_start_usd = float(
            start_costs.ravel() @ group_cols[:, :, Z].ravel() + c[fresh_col0:s_col0] @ x[fresh_col0:s_col0]
        )
        result_bound.plan_delay_usd = float(c[e_col0:] @ x[e_col0:])
        result_bound.plan_peak_machines = int(np.rint(group_cols[:, :, Y].sum(axis=1).max()))
    return result_bound
