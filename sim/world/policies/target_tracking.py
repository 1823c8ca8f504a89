"""A target-tracking autoscaler, as HPA or KEDA would run it: capacity = load ÷ target utilisation.

Load is the recent arrival rate plus the backlog spread over an hour. Scale-up is immediate with a short
cooldown; scale-down follows the highest recommendation of the last 5 minutes (HPA's default stabilisation
window) and waits a cooldown (KEDA's default cooldownPeriod, 300 s) between steps.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from sim.world.model import Action, Launch, MachineState, Remove, WorldView
from sim.world.policies.hygiene import broken_machines

# DESIGN.md: one machine, pipelined, finishes a task every ~30 s
DEFAULT_TASKS_PER_H = 120.0


@dataclass(frozen=True)
class TargetTrackingConfig:
    decision_interval_s: float = 60.0
    target_utilisation: float = 0.8
    # HPA's default: no change while the load is within 10% of the target
    tolerance: float = 0.1
    metric_window_s: float = 300.0
    backlog_drain_s: float = 3600.0
    scale_up_cooldown_s: float = 180.0
    scale_down_stabilisation_s: float = 300.0
    scale_down_cooldown_s: float = 300.0
    max_launches_per_decision: int = 100


class TargetTrackingPolicy:
    name = "target-tracking"

    def __init__(self, config: TargetTrackingConfig = TargetTrackingConfig()) -> None:
        self.config = config
        self.decision_interval_s = config.decision_interval_s
        self._recommendations: deque[tuple[float, int]] = deque()
        self._last_up_s = -math.inf
        self._last_down_s = -math.inf

    def decide(self, view: WorldView) -> Sequence[Action]:
        config = self.config
        actions: list[Action] = list(broken_machines(view))
        broken = {action.instance_id for action in actions if isinstance(action, Remove)}
        fleet = [m for m in view.machines if m.instance_id not in broken]
        producing = [m for m in fleet if m.state is MachineState.PRODUCING]
        loading = [m for m in fleet if m.state is MachineState.LOADING]
        current = len(producing) + len(loading)
        rates = [m.reference_tasks_per_h for m in producing + loading]
        per_machine_per_h = sum(rates) / len(rates) if rates else DEFAULT_TASKS_PER_H

        window_min = max(1, round(config.metric_window_s / 60))
        recent = view.arrivals_by_minute[-window_min - 1 : -1] or view.arrivals_by_minute[-1:]
        arrival_per_h = sum(recent) * 60.0 / max(1, len(recent))
        load_per_h = arrival_per_h + view.pending_tasks / (config.backlog_drain_s / 3600.0)
        desired = math.ceil(load_per_h / (per_machine_per_h * config.target_utilisation) - 1e-9)
        utilisation_ratio = load_per_h / (max(current, 1) * per_machine_per_h * config.target_utilisation)
        if current and abs(utilisation_ratio - 1) <= config.tolerance:
            desired = current
        # a scheduled minimum (AWS's predictive scaling raises it ahead of forecast load) bounds both directions
        desired = max(desired, self.minimum_capacity(view, per_machine_per_h))

        now = view.now_s
        self._recommendations.append((now, desired))
        while self._recommendations and self._recommendations[0][0] < now - config.scale_down_stabilisation_s:
            self._recommendations.popleft()
        stabilised = max(r for _, r in self._recommendations)

        if desired > current and now - self._last_up_s >= config.scale_up_cooldown_s:
            actions.append(Launch(min(desired - current, config.max_launches_per_decision), reason="target"))
            self._last_up_s = now
        elif stabilised < current and now - max(self._last_down_s, self._last_up_s) >= config.scale_down_cooldown_s:
            surplus = current - stabilised
            # pending machines go first (newest first), then the producers the job system fills last
            victims = sorted(loading, key=lambda m: -m.created_s) + sorted(
                producing, key=lambda m: (m.last_task_s or -math.inf, -m.created_s)
            )
            actions += [Remove(m.instance_id, "drain", "over_provisioned") for m in victims[:surplus]]
            self._last_down_s = now
        return actions

    def minimum_capacity(self, view: WorldView, per_machine_per_h: float) -> int:
        """The group's minimum size now; plain target tracking has none."""
        return 0
