"""One evaluation: a trace, a policy, a scenario and a seed in; the scored run (or the clairvoyant bound) out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services.decider.guardrails import GuardrailConfig
from sim.vast.scenario import Scenario
from sim.world.bound import BoundResult, clairvoyant_bound
from sim.world.bound_milp import IntegerBoundResult, integer_bound
from sim.world.engine import Engine, RunResult, Sample, WorldPolicy
from sim.world.fluid import FluidQueue
from sim.world.model import Action, WorldConfig, WorldView, offers_from_scenario
from sim.world.objective import ObjectiveConfig, WaitStats
from sim.world.policies import target_tracking_hindsight as hindsight
from sim.world.policies.aws_predictive import AwsPredictivePolicy
from sim.world.policies.demand_based import DemandBasedPolicy
from sim.world.policies.reactive import ReactivePolicy
from sim.world.policies.target_tracking import TargetTrackingPolicy
from sim.world.policies.vast_serverless import VastServerlessConfig, VastServerlessPolicy
from sim.world.trace import Trace

CLAIRVOYANT = "clairvoyant"
# a real run that follows the bound's plan reading the future: achievable, so the optimum lies between the two
CLAIRVOYANT_RUN = "clairvoyant-run"
# the same two for a world whose policies may also park and bid: a policy with those levers is scored against
# these, as it may go below the on-demand bound (the run parks; it does not bid)
CLAIRVOYANT_LEVERS = "clairvoyant-levers"
CLAIRVOYANT_RUN_LEVERS = "clairvoyant-run-levers"
# the bound with whole machines (bound_milp.py): HiGHS' dual bound within its time limit; tighter where a fleet
# must rent a whole machine for a trickle or serve a spike, looser than the fluid bound when the solve stops early
CLAIRVOYANT_WHOLE = "clairvoyant-whole-machines"
# target tracking with its knobs picked per trace from the outcome: a reference between the baselines and the bound
TARGET_TRACKING_HINDSIGHT = hindsight.NAME


def default_guardrails(world: WorldConfig, scenario: Scenario, trace: Trace) -> GuardrailConfig:
    """The decider's guardrails scaled to the trace (sim/world/policies/predictive.py), the same for every policy."""
    from sim.world.policies.predictive import default_guardrails as scaled

    return scaled(world, scenario, trace)


def _predictive(guardrails: GuardrailConfig) -> WorldPolicy:
    # the real decider, demand and fleet cores, imported only when asked for; it runs the guardrails itself
    from sim.world.policies.predictive import PredictiveAdapter

    return PredictiveAdapter(guardrails)


def _predictive_with(name: str, **levers: Any) -> Callable[[GuardrailConfig], WorldPolicy]:
    """FleetPilot's policy with vast's other levers: parking (stop and start) and interruptible bids."""

    def factory(guardrails: GuardrailConfig) -> WorldPolicy:
        from services.decider.policy import PolicyConfig
        from sim.world.policies.predictive import PredictiveAdapter

        adapter = PredictiveAdapter(guardrails, PolicyConfig(**levers))
        adapter.name = name
        return adapter

    return factory


# each policy from the guardrails every run meets (the baselines meet them in the engine)
POLICY_FACTORIES: dict[str, Callable[[GuardrailConfig], WorldPolicy]] = {
    "predictive": _predictive,
    # the default config parks; without any lever it rents on-demand and gives machines back, as before
    "predictive-on-demand": _predictive_with("predictive-on-demand", park=False),
    "predictive-park": _predictive_with("predictive-park", park=True),
    # the default parks and chooses launches by expected cost over demand scenarios (policy/mpc.py); this one
    # sizes by the rules' point target instead, as the policy did before
    "predictive-rules": _predictive_with("predictive-rules", park=True, mpc=False),
    "predictive-bids": _predictive_with("predictive-bids", park=False, bid_share=0.5),
    "predictive-levers": _predictive_with("predictive-levers", park=True, bid_share=0.5),
    # parking with a standby pool of loaded machines (PolicyConfig.standby_fraction; off by default)
    "predictive-standby": _predictive_with("predictive-standby", park=True, standby_fraction=1.0),
    "reactive": lambda guardrails: ReactivePolicy(),
    "target-tracking": lambda guardrails: TargetTrackingPolicy(),
    "aws-predictive": lambda guardrails: AwsPredictivePolicy(),
    "demand-based": lambda guardrails: DemandBasedPolicy(),
    # a user sets max_workers to the fleet they allow: the guardrails' cap, the same every policy meets
    "vast-serverless": lambda guardrails: VastServerlessPolicy(
        VastServerlessConfig(max_workers=guardrails.max_instances)
    ),
}
# the scalers a user would pick instead of FleetPilot's: what "the best baseline" is taken over
BASELINES = ("reactive", "target-tracking", "aws-predictive", "demand-based", "vast-serverless")
# references that read the trace's future or outcome: reported apart, never "the best baseline"
REFERENCES = (TARGET_TRACKING_HINDSIGHT,)
POLICIES = (
    *POLICY_FACTORIES,
    *REFERENCES,
    CLAIRVOYANT,
    CLAIRVOYANT_RUN,
    CLAIRVOYANT_LEVERS,
    CLAIRVOYANT_RUN_LEVERS,
    CLAIRVOYANT_WHOLE,
)
# the policies that use vast's levers (parking, bids): the on-demand bound does not hold for them
LEVER_POLICIES = (
    "predictive",
    "predictive-park",
    "predictive-rules",
    "predictive-bids",
    "predictive-levers",
    "predictive-standby",
    "vast-serverless",
)


def bound_for(policy: str) -> str:
    """The clairvoyant bound a policy's objective is divided by: the levers one for a policy that uses them."""
    return CLAIRVOYANT_LEVERS if policy in LEVER_POLICIES else CLAIRVOYANT


def clairvoyant_run_for(policy: str) -> str:
    """The achievable clairvoyant run a policy is compared with: the one that parks for a policy with levers."""
    return CLAIRVOYANT_RUN_LEVERS if policy in LEVER_POLICIES else CLAIRVOYANT_RUN


@dataclass
class Evaluation:
    """What `fleetpilot sim evaluate` prints, for a simulated policy or for the clairvoyant bound."""

    policy: str
    kind: str  # "simulated", "clairvoyant_run" (a run that reads the future) or "lower_bound"
    trace: str
    seed: int
    tasks_submitted: int
    tasks_completed: float
    cost_usd: float
    delay_cost_usd: float
    # what a run did; None for the lower bound, which is a number, not a fleet (its plan is fractional)
    wait_p50_s: float | None
    wait_p95_s: float | None
    wait_max_s: float | None
    machine_hours: float | None
    idle_machine_hours: float | None
    launches: int | None
    wasted_launches: int | None
    peak_instances: int | None
    sim_wall_s: float
    objective: ObjectiveConfig
    extra: dict[str, Any] = field(default_factory=dict)
    # said before any figure: the market cannot supply the trace's peak, launches were refused, ...
    warnings: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list, repr=False)
    run: RunResult | None = field(default=None, repr=False)
    bound: BoundResult | None = field(default=None, repr=False)

    @property
    def objective_usd(self) -> float:
        return self.cost_usd + self.delay_cost_usd

    def as_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "policy": self.policy,
            "kind": self.kind,
            "trace": self.trace,
            "seed": self.seed,
            "tasks_submitted": self.tasks_submitted,
            "tasks_completed": round(self.tasks_completed),
            "cost_usd": round(self.cost_usd, 4),
            "delay_cost_usd": round(self.delay_cost_usd, 4),
            "objective_usd": round(self.objective_usd, 4),
            "wait_p50_min": _rounded(self.wait_p50_s, 60),
            "wait_p95_min": _rounded(self.wait_p95_s, 60),
            "wait_max_min": _rounded(self.wait_max_s, 60),
            "machine_hours": _rounded(self.machine_hours),
            "idle_machine_hours": _rounded(self.idle_machine_hours),
            "launches": self.launches,
            "wasted_launches": self.wasted_launches,
            "peak_instances": self.peak_instances,
            "sim_wall_s": round(self.sim_wall_s, 3),
            "grace_min": self.objective.grace_min,
            "delay_usd_per_task_h": self.objective.delay_usd_per_task_h,
            "warnings": list(self.warnings),
        }
        record.update(self.extra)
        return record


def _rounded(value: float | None, unit: float = 1.0) -> float | None:
    return None if value is None else round(value / unit, 3)


def _percentile_ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(values) * 1000, q)), 3) if values else 0.0


def _from_run(run: RunResult, objective: ObjectiveConfig) -> Evaluation:
    return Evaluation(
        policy=run.policy,
        kind="simulated",
        trace=run.trace,
        seed=run.seed,
        tasks_submitted=run.tasks_submitted,
        tasks_completed=run.tasks_completed,
        cost_usd=run.cost_usd,
        delay_cost_usd=run.delay_cost_usd,
        wait_p50_s=run.wait_p50_s,
        wait_p95_s=run.wait_p95_s,
        wait_max_s=run.wait_max_s,
        machine_hours=run.machine_hours,
        idle_machine_hours=run.idle_machine_hours,
        launches=run.launches,
        wasted_launches=run.wasted_launches,
        peak_instances=run.peak_instances,
        sim_wall_s=run.sim_wall_s,
        objective=objective,
        extra={
            "sim_cpu_s": round(run.sim_cpu_s, 3),
            "tasks_unserved": round(run.tasks_unserved),
            "launches_refused": run.launches_refused,
            "producing_machine_hours": round(run.producing_machine_hours, 3),
            "storage_cost_usd": round(run.storage_cost_usd, 3),
            "parks": run.parks,
            "resumes": run.resumes,
            "resumes_gpu_taken": run.resumes_gpu_taken,
            # resumes whose GPU was taken that the policy gave up on; of those given up while the rest of the fleet
            # was short of the next hour, the ones the same decision replaced (a launch or another resume)
            "failed_resumes_given_up": run.failed_resumes_given_up,
            "failed_resumes_short": run.failed_resumes_short,
            "failed_resumes_replaced_same_run": run.failed_resumes_replaced_same_run,
            "failed_resume_wait_max_min": round(run.failed_resume_wait_max_s / 60, 1),
            "outbid_pauses": run.outbid_pauses,
            "end_h": round(run.end_s / 3600, 3),
            "decisions": run.decisions,
            # the whole call per world tick; a policy with its own report replaces the policy_ms figures
            "decide_ms_per_tick_p50": _percentile_ms(run.decision_wall_s, 50),
            "decide_ms_per_tick_p99": _percentile_ms(run.decision_wall_s, 99),
            "policy_ms_per_decision_p50": _percentile_ms(run.decision_wall_s, 50),
            "policy_ms_per_decision_p99": _percentile_ms(run.decision_wall_s, 99),
        },
        samples=run.samples,
        run=run,
    )


def _plan_samples(trace: Trace, bound: BoundResult, objective: ObjectiveConfig) -> list[Sample]:
    """The relaxation's capacity plan served FIFO, for the plot only: a fractional plan's waits are no run's."""
    queue = FluidQueue(WaitStats(objective.grace_s))
    step_s = bound.lp_step_min * 60.0
    samples = []
    minutes = len(bound.prices_usd_per_task)
    cost_usd = 0.0
    for minute in range(minutes):
        step = min(minute * 60.0 // step_s, len(bound.plan_tasks_per_h) - 1)
        rate_per_h = float(bound.plan_tasks_per_h[int(step)])
        arrivals = trace.arrivals_per_min[minute] if minute < trace.minutes else 0
        queue.advance(minute * 60.0, minute * 60.0 + 60.0, arrivals / 60.0, rate_per_h / 3600.0)
        machines = float(bound.plan_machines[int(step)])
        spend_usd_per_h = float(bound.plan_spend_usd_per_h[int(step)])
        cost_usd += spend_usd_per_h / 60.0
        if minute % max(1, minutes // 1500) == 0:
            samples.append(Sample(minute * 60.0, queue.count, 0, round(machines), 0, 0, spend_usd_per_h, cost_usd))
        if minute >= trace.minutes and queue.count <= 1e-9:
            break
    return samples


def _from_bound(
    trace: Trace, bound: BoundResult, seed: int, objective: ObjectiveConfig, policy: str = CLAIRVOYANT
) -> Evaluation:
    """The bound and nothing a run would show: its waits, machines and launches would come from a fractional plan
    that no fleet can follow, so they are left out (`clairvoyant-run` is the achievable run)."""
    evaluation = _lower_bound(
        trace, policy, seed, objective, bound.cost_usd, bound.delay_cost_usd, bound.wall_s,
        extra={
            "work_bound_usd": round(bound.work_bound_usd, 4),
            "lp_objective_usd": round(bound.lp_objective_usd, 4),
            "lp_iterations": bound.lp_iterations,
            "lp_converged": bound.lp_converged,
            "lp_step_min": bound.lp_step_min,
        },
    )  # fmt: skip
    evaluation.samples = _plan_samples(trace, bound, objective)
    evaluation.bound = bound
    return evaluation


def _lower_bound(
    trace: Trace,
    policy: str,
    seed: int,
    objective: ObjectiveConfig,
    cost_usd: float,
    delay_cost_usd: float,
    wall_s: float,
    extra: dict[str, Any],
) -> Evaluation:
    """A bound's evaluation: its dollars and nothing a run would show (no waits, machines or launches)."""
    return Evaluation(
        policy=policy,
        kind="lower_bound",
        trace=trace.name,
        seed=seed,
        tasks_submitted=trace.total_tasks,
        tasks_completed=float(trace.total_tasks),
        cost_usd=cost_usd,
        delay_cost_usd=delay_cost_usd,
        wait_p50_s=None,
        wait_p95_s=None,
        wait_max_s=None,
        machine_hours=None,
        idle_machine_hours=None,
        launches=None,
        wasted_launches=None,
        peak_instances=None,
        sim_wall_s=wall_s,
        objective=objective,
        extra=extra,
    )


def _from_integer_bound(trace: Trace, bound: IntegerBoundResult, seed: int, objective: ObjectiveConfig) -> Evaluation:
    """HiGHS' dual bound as the objective (the program's cost and delay split is known only for its best plan,
    which is in `extra`)."""
    return _lower_bound(
        trace, CLAIRVOYANT_WHOLE, seed, objective, bound.objective_usd, 0.0, bound.wall_s,
        extra={
            "milp_solved": bound.solved,
            "milp_gap": round(bound.gap, 4),
            "milp_step_min": bound.step_min,
            "milp_groups": bound.groups,
            "plan_objective_usd": round(bound.primal_usd, 4),
            "plan_machine_usd": round(bound.plan_machine_usd, 4),
            "plan_start_usd": round(bound.plan_start_usd, 4),
            "plan_delay_usd": round(bound.plan_delay_usd, 4),
            "plan_peak_machines": bound.plan_peak_machines,
        },
    )  # fmt: skip


def evaluate_clairvoyant_plan(
    trace: Trace,
    scenario: Scenario | None = None,
    seed: int = 0,
    world: WorldConfig | None = None,
    objective: ObjectiveConfig | None = None,
    levers: bool = False,
) -> Evaluation:
    """Real runs that follow the bound's plan knowing the future, the best of a few capacity margins: a ceiling
    on the optimum (a diagnostic; its scans are O(fleet) per launch, so it is meant for traces of a day or two).
    With `levers` the runs also park what the plan wants back soon and resume it (reading each resume's luck)."""
    from sim.world.policies.clairvoyant_plan import ClairvoyantPlan

    scenario, world, objective = scenario or Scenario(), world or WorldConfig(), objective or ObjectiveConfig()
    # the on-demand bound's plan either way: the run rents at on-demand prices (it does not bid), and the levers
    # relaxation, priced at min_bid, would hold capacity the run pays twice as much for
    bound = clairvoyant_bound(trace, scenario, world, objective)
    best: Evaluation | None = None
    for headroom in (1.0, 1.03, 1.08):
        engine = Engine(trace, _Placeholder(), scenario, seed, world, objective)
        engine.policy = ClairvoyantPlan(engine, bound, headroom, park=levers)
        run = _from_run(engine.run(), objective)
        run.extra["plan_headroom"] = headroom
        if best is None or run.objective_usd < best.objective_usd:
            best = run
    assert best is not None
    best.policy, best.kind = (CLAIRVOYANT_RUN_LEVERS if levers else CLAIRVOYANT_RUN), "clairvoyant_run"
    return best


class _Placeholder:
    name = "clairvoyant-plan"
    decision_interval_s = 60.0

    def decide(self, view: WorldView) -> Sequence[Action]:
        return []


def evaluate(
    trace: Trace,
    policy: str,
    scenario: Scenario | None = None,
    seed: int = 0,
    world: WorldConfig | None = None,
    objective: ObjectiveConfig | None = None,
) -> Evaluation:
    scenario = scenario or Scenario()
    world = world or WorldConfig()
    objective = objective or ObjectiveConfig()
    if policy in (CLAIRVOYANT, CLAIRVOYANT_LEVERS):
        levers = policy == CLAIRVOYANT_LEVERS
        bound = clairvoyant_bound(trace, scenario, world, objective, levers=levers)
        evaluation = _from_bound(trace, bound, seed, objective, policy)
    elif policy == CLAIRVOYANT_WHOLE:
        evaluation = _from_integer_bound(trace, integer_bound(trace, scenario, world, objective), seed, objective)
    elif policy in (CLAIRVOYANT_RUN, CLAIRVOYANT_RUN_LEVERS):
        levers = policy == CLAIRVOYANT_RUN_LEVERS
        evaluation = evaluate_clairvoyant_plan(trace, scenario, seed, world, objective, levers)
    elif policy == TARGET_TRACKING_HINDSIGHT:
        evaluation = evaluate_hindsight(trace, scenario, seed, world, objective)
    else:
        factory = POLICY_FACTORIES.get(policy)
        if factory is None:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        evaluation = _evaluate_policy(trace, factory, scenario, seed, world, objective)
    supply = market_supply(trace, scenario, world)
    evaluation.extra["market"] = supply.as_dict()
    if supply.warning:
        evaluation.warnings.insert(0, supply.warning)
    return evaluation


def _evaluate_policy(
    trace: Trace,
    factory: Callable[[GuardrailConfig], WorldPolicy],
    scenario: Scenario,
    seed: int,
    world: WorldConfig,
    objective: ObjectiveConfig,
) -> Evaluation:
    # every policy meets the same guardrails: the predictive adapter runs them as the decider does, the engine
    # puts every other policy's launches through them
    guardrails = default_guardrails(world, scenario, trace)
    engine_policy = factory(guardrails)
    run = Engine(trace, engine_policy, scenario, seed, world, objective, guardrails=guardrails).run()
    evaluation = _from_run(run, objective)
    report = getattr(engine_policy, "report", None)
    if callable(report):
        evaluation.extra.update(report())
    # the engine logs what the market, its cap and (for the baselines) the guardrails refused; the predictive
    # adapter logs what its own guardrails refused or trimmed
    logged = [*run.launch_refusals, *getattr(engine_policy, "launch_refusals", ())]
    refusals = [Refusal(at_s, str(limit), count) for at_s, limit, count in logged]
    evaluation.extra["limits"] = limits_summary(refusals)
    if warning := limits_warning(evaluation.extra["limits"]):
        evaluation.warnings.append(warning)
    return evaluation


def _fixed(policy: WorldPolicy) -> Callable[[GuardrailConfig], WorldPolicy]:
    """A factory for a policy that meets the guardrails in the engine (as every baseline does)."""
    return lambda guardrails: policy


def evaluate_hindsight(
    trace: Trace, scenario: Scenario, seed: int, world: WorldConfig, objective: ObjectiveConfig
) -> Evaluation:
    """Target tracking under every point of its grid, the best kept: a reference that reads the trace's outcome
    (kind "hindsight_reference"), never a baseline a user could run."""
    best: Evaluation | None = None
    wall_s = 0.0
    for config in hindsight.grid():
        grid_point = _fixed(hindsight.TargetTrackingGridPoint(config))
        run = _evaluate_policy(trace, grid_point, scenario, seed, world, objective)
        run.extra["hindsight_knobs"] = hindsight.knobs(config)
        wall_s += run.sim_wall_s
        if best is None or run.objective_usd < best.objective_usd:
            best = run
    assert best is not None
    best.kind = "hindsight_reference"
    best.sim_wall_s = wall_s  # the reference took every grid point's run
    best.extra["hindsight_grid_points"] = len(hindsight.grid())
    return best


@dataclass(frozen=True)
class Refusal:
    """Launches a run asked for and did not get, and what stopped them."""

    at_s: float
    # "market" (no free offer within the launch's caps), "world_max_instances" (the world's own cap), or the name
    # of the guardrail rule that refused or trimmed the launch
    limit: str
    count: int = 1


LIMIT_WORDS = {
    "market": "the market had no free offer within the launch's GPU models and price cap",
    "world_max_instances": "the world's instance cap",
}


def limits_summary(refusals: Sequence[Refusal]) -> list[dict[str, Any]]:
    """Per limit: how many machines it refused, from when to when, in how many distinct hours (most first).

    A refused launch is asked for again at the next decision, so the count is machines asked for and not launched,
    summed over decisions."""
    by_limit: dict[str, list[Refusal]] = {}
    for refusal in refusals:
        by_limit.setdefault(refusal.limit, []).append(refusal)
    summary = [
        {
            "limit": limit,
            "refused": sum(r.count for r in events),
            "first_h": round(min(r.at_s for r in events) / 3600, 2),
            "last_h": round(max(r.at_s for r in events) / 3600, 2),
            "hours_with_refusals": len({int(r.at_s // 3600) for r in events}),
        }
        for limit, events in by_limit.items()
    ]
    return sorted(summary, key=lambda entry: -entry["refused"])


def limits_warning(summary: Sequence[dict[str, Any]]) -> str:
    if not summary:
        return ""
    parts = [
        f"{entry['refused']:,} by {LIMIT_WORDS.get(entry['limit'], 'guardrail ' + entry['limit'])}"
        f" (from hour {entry['first_h']:g} to {entry['last_h']:g}, in {entry['hours_with_refusals']} hours)"
        for entry in summary
    ]
    return "launches were refused: " + "; ".join(parts) + ". The run was held back, not only the policy's choice"


@dataclass(frozen=True)
class MarketSupply:
    """Can the scenario's market serve the trace's busiest hour at all (every offer rented, at full speed)?"""

    offers: int
    usable_offers: int  # the world's instance cap may allow fewer than the market has
    capacity_tasks_per_h: float
    peak_tasks_per_h: float

    @property
    def warning(self) -> str:
        if self.capacity_tasks_per_h >= self.peak_tasks_per_h:
            return ""
        return (
            f"the market cannot supply this trace's peak: {self.usable_offers} usable offers serve at most"
            f" {self.capacity_tasks_per_h:,.0f} tasks/h, the busiest hour brings {self.peak_tasks_per_h:,.0f};"
            " every policy runs out of offers and queues, so the figures measure the market, not the policy"
            " (pass a larger market with --scenario)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "offers": self.offers,
            "usable_offers": self.usable_offers,
            "capacity_tasks_per_h": round(self.capacity_tasks_per_h, 1),
            "trace_peak_tasks_per_h": round(self.peak_tasks_per_h, 1),
            "supplies_peak": not self.warning,
        }


def market_supply(trace: Trace, scenario: Scenario, world: WorldConfig) -> MarketSupply:
    offers = offers_from_scenario(scenario)
    # every machine at its real pace (the catalog's, off by its model's and its own factor)
    usable = sorted((offer.tasks_per_h for offer in offers), reverse=True)[: world.max_instances]
    return MarketSupply(len(offers), len(usable), float(sum(usable)), trace.peak_tasks_per_h)
