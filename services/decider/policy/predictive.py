"""The predictive policy: size the producing fleet for demand over the hours a machine needs to arrive.

`recommend` composes small planners, each in its own module, in the manner of cluster-autoscaler's expanders:
sizing (how many machines the demand needs: sizing.py), cleanup (failed, drained, parked and outbid machines:
cleanup.py), growth (replacements, resumes, launches and bids: growth.py), scale-down (scale_down.py). Its
thresholds are PolicyConfig's (config.py).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from services.decider.policy.base import LaunchPlan, Recommendation, RemovalPlan, ResumePlan
from services.decider.policy.cleanup import cleanup
from services.decider.policy.config import DEFAULT_CONFIG, PolicyConfig
from services.decider.policy.fleet_view import split_fleet
from services.decider.policy.growth import grow, lost_machines
from services.decider.policy.mpc import choose_launches, on_the_way_kept
from services.decider.policy.parking import ParkHistory, describe, parking_pays_for_fleet
from services.decider.policy.scale_down import scale_down_plan
from services.decider.policy.sizing import Sizing, figures, numbers, size, waiting_for_gpu
from shared.contract import DemandSignal, FleetSnapshot

# what the explanation says of a machine given back that was not plain capacity: drained in an earlier run, or
# resumed and not producing yet (vast still showing it stopped past a restart: its GPU likely someone else's)
AFTER_DRAINING = " after draining"
STILL_RESUMING = " still resuming"
WAITING_FOR_GPU = " whose resume waits for its GPU"


def recommend(
    signal: DemandSignal,
    snapshot: FleetSnapshot,
    now: datetime,
    config: PolicyConfig = DEFAULT_CONFIG,
    *,
    unobserved_launches: int = 0,
) -> Recommendation:
    """Launches, resumes, removals or hold, with a one-line explanation citing the numbers.

    `unobserved_launches`: machines launched recently that the snapshot does not show yet; counted as arriving.
    """
    fleet = split_fleet(snapshot)
    parking_note = ""
    history = ParkHistory.of(snapshot.park_outcomes)
    if config.park and not parking_pays_for_fleet(snapshot.instances, history, config):
        # the history says parked machines are rarely wanted again in time: surplus is given back, not parked
        config = replace(config, park=False)
        parking_note = f"; parking does not pay now ({describe(snapshot.park_outcomes)})"
    sizing = size(signal, fleet, now, config, unobserved_launches)
    removals = cleanup(fleet, now, config, sizing.stalled_state, history)
    # the expected-cost choice, at the fleet's median price and the shortest window's rate (worked out once)
    inputs = _mpc_inputs(signal, snapshot, sizing, config) if config.mpc else None
    mpc = choose_launches(sizing, *inputs, lost_machines(sizing, fleet)) if inputs else None
    growth = grow(sizing, fleet, snapshot, config, mpc, now)
    if not growth.launches and not growth.resumes and growth.rate_deficit <= 0 and not sizing.stalled_state:
        # the machines on the way that the same expected cost keeps (a scale-down never gives those back)
        kept = on_the_way_kept(sizing, *inputs, lost_machines(sizing, fleet)) if inputs else 0
        removals += scale_down_plan(signal, fleet, sizing, now, config, kept)
    note = growth.note + (mpc.describe() if mpc is not None else "") + parking_note
    explanation = _explain(
        growth.launches,
        removals,
        numbers(sizing, config) + note,
        sizing.stalled_state,
        growth.resumes,
        drained=frozenset(line.instance_id for line in fleet.draining),
        resuming={line.instance_id: waiting_for_gpu(line, now, config) for line in fleet.resuming},
        failures={line.instance_id: line.failure_reason.value for line in fleet.failed if line.failure_reason},
    )
    return Recommendation(
        tuple(growth.launches),
        tuple(removals),
        explanation,
        figures(sizing, fleet, unobserved_launches),
        tuple(growth.resumes),
    )


def _mpc_inputs(
    signal: DemandSignal, snapshot: FleetSnapshot, sizing: Sizing, config: PolicyConfig
) -> tuple[float, PolicyConfig, float]:
    """The shortest window's rate, the config and the fleet's median price (the default before any is priced); the
    machines just lost (failed, outbid, stalled) are counted by the caller as having served the arrivals before."""
    prices = sorted(line.price_usd_per_h for line in snapshot.instances if line.price_usd_per_h > 0)
    price = prices[len(prices) // 2] if prices else config.machine_prior_price_usd_per_h
    short = signal.window_near(0)
    return short.arrival_rate_per_h if short is not None else sizing.rate_now, config, price


def _explain(
    launches: list[LaunchPlan],
    removals: list[RemovalPlan],
    numbers: str,
    stalled_state: bool,
    resumes: list[ResumePlan] | None = None,
    *,
    drained: frozenset[int] = frozenset(),
    resuming: dict[int, bool] | None = None,
    failures: dict[int, str] | None = None,
) -> str:
    """The step's actions, then the figures they rest on. A stop or destroy of a machine drained in an earlier
    run says so: counted against the need beside it, `stop 1 (park): need 2 ...; have 1 producing + 1 arriving`
    read as a machine taken from a fleet already short (the busy demo's audit); it was surplus when its drain
    began, and the drain has ended (its tasks done, or the longest drain waited out). So does a stop of a machine
    resumed in an earlier run and not producing yet (`resuming`: whether vast still shows it stopped past a
    restart's minutes, its GPU likely someone else's): the busy demo's audit read `stop 1 (park)` with 118 tasks
    queued, of a machine resumed a quarter of an hour before. A failed machine's removal names fleet's failure
    where it says more than the removal's reason (`failures`): the busy demo's audit read `destroy 1 (failed)` of
    two resumes whose GPUs someone else had taken, `destroy 1 (failed: gpu_taken)` now."""
    parts = [f"resume {len(resumes)} parked ({resumes[0].reason.value})"] if resumes else []
    parts += [
        f"launch {plan.count} ({plan.reason.value}, {plan.launch_priority}"
        + (f", {plan.interruptible} interruptible" if plan.interruptible else "")
        + ")"
        for plan in launches
    ]
    resuming, failures = resuming or {}, failures or {}

    def whose(instance_id: int) -> str:
        if instance_id in drained:
            return AFTER_DRAINING
        if instance_id in resuming:
            return WAITING_FOR_GPU if resuming[instance_id] else STILL_RESUMING
        return ""

    for verb in ("drain", "destroy", "stop"):
        for which in ("", AFTER_DRAINING, STILL_RESUMING, WAITING_FOR_GPU):
            plans = [plan for plan in removals if plan.verb == verb and whose(plan.instance_id) == which]
            if plans:
                reasons = ", ".join(sorted({_reason(plan, failures) for plan in plans}))
                parts.append(f"{verb} {len(plans)}{which} ({reasons})")
    head = "; ".join(parts) if parts else "hold"
    stall = " workers stalled: replace, never scale down;" if stalled_state else ""
    return f"{head}:{stall} {numbers}"


def _reason(plan: RemovalPlan, failures: dict[int, str]) -> str:
    failure = failures.get(plan.instance_id)
    return plan.reason.value if failure in (None, plan.reason.value) else f"{plan.reason.value}: {failure}"


class PredictivePolicy:
    """The predictive strategy behind the `Policy` interface."""

    name = "predictive"

    def __init__(self, config: PolicyConfig = DEFAULT_CONFIG) -> None:
        self.config = config

    def recommend(
        self, signal: DemandSignal, snapshot: FleetSnapshot, now: datetime, *, unobserved_launches: int = 0
    ) -> Recommendation:
        return recommend(signal, snapshot, now, self.config, unobserved_launches=unobserved_launches)

    def with_config(self, config: PolicyConfig) -> PredictivePolicy:
        """The same strategy under another config (an operator's lever directive); this one is left as it is."""
        return PredictivePolicy(config)
