"""What `fleetpilot sim evaluate` does once its options are parsed: load, configure, evaluate."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.vast.scenario import Scenario
from sim.world.evaluate import POLICIES, Evaluation, evaluate
from sim.world.model import WorldConfig
from sim.world.objective import ObjectiveConfig
from sim.world.trace import load_trace


@dataclass(frozen=True)
class EvaluateRequest:
    trace_path: str
    policy: str
    scenario_path: str | None = None
    seed: int | None = None
    grace_min: float | None = None
    delay_usd_per_task_h: float | None = None
    initial_machines: int | None = None


def run_evaluate(request: EvaluateRequest) -> Evaluation:
    if request.policy not in POLICIES:
        raise ValueError(f"unknown policy {request.policy!r}; choose one of {', '.join(POLICIES)}")
    trace = load_trace(request.trace_path)
    scenario = Scenario.load(request.scenario_path) if request.scenario_path else Scenario()
    if request.seed is not None:
        scenario = scenario.model_copy(update={"seed": request.seed})
    objective = ObjectiveConfig()
    if request.grace_min is not None:
        objective = replace(objective, grace_min=request.grace_min)
    if request.delay_usd_per_task_h is not None:
        objective = replace(objective, delay_usd_per_task_h=request.delay_usd_per_task_h)
    world = WorldConfig(initial_machines=request.initial_machines)
    return evaluate(trace, request.policy, scenario, scenario.seed, world, objective)
