"""The old behaviour, the baseline to beat: launch when tasks are pending, give machines back when none are.

It scales on the instantaneous queue. 8 pending tasks are 4 minutes of one machine's work, yet they buy a
machine that arrives 1-2 h later; a quiet minute gives back machines the next busy hour needs again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.world.model import Action, Launch, MachineState, Remove, WorldView
from sim.world.policies.hygiene import broken_machines


@dataclass(frozen=True)
class ReactiveConfig:
    decision_interval_s: float = 60.0
    pending_threshold: int = 5
    # one machine per half hour of a reference machine's work in the queue, less those already starting
    tasks_per_launch: float = 60.0
    max_launches_per_decision: int = 10
    # "no pending tasks": machines that had no task since the previous check are given back
    idle_s: float = 60.0


class ReactivePolicy:
    name = "reactive"

    def __init__(self, config: ReactiveConfig = ReactiveConfig()) -> None:
        self.config = config
        self.decision_interval_s = config.decision_interval_s

    def decide(self, view: WorldView) -> Sequence[Action]:
        config = self.config
        actions: list[Action] = list(broken_machines(view))
        pending = view.pending_tasks
        loading = sum(1 for m in view.machines if m.state is MachineState.LOADING)
        if pending > config.pending_threshold:
            wanted = max(1, math.ceil(pending / config.tasks_per_launch)) - loading
            if wanted > 0:
                actions.append(Launch(min(wanted, config.max_launches_per_decision), reason="pending"))
        elif pending < 0.5:
            for machine in view.machines:
                if machine.state is not MachineState.PRODUCING:
                    continue
                if machine.last_task_s is None or view.now_s - machine.last_task_s >= config.idle_s:
                    # given back as the old system did (destroy): a vast stop would keep the instance, its disk
                    # billed and counted against the instance cap, and this policy never starts one again
                    actions.append(Remove(machine.instance_id, "destroy", "idle"))
        return actions
