"""An achievable clairvoyant run: follow the bound's relaxed capacity plan knowing every machine's future.

The bound (sim/world/bound.py) is a proven floor; this is a ceiling on the optimum: a real run in the world
by a policy that may read what no real policy can (the trace ahead, each launch's startup time and fate).
The best achievable objective lies between the two, which says how loose the bound is on a trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.vast.scenario import Fate
from sim.world.bound import BoundResult
from sim.world.engine import Engine
from sim.world.model import Action, Launch, MachineState, Remove, WorldView


class ClairvoyantPlan:
    name = "clairvoyant-plan"
    decision_interval_s = 60.0

    def __init__(self, engine: Engine, bound: BoundResult, headroom: float = 1.0) -> None:
        self.engine = engine  # privileged: the schedule of every machine and the fate of the next launch
        self.headroom = headroom  # the plan is fluid and fractional; whole machines and FIFO waits need a little
        self.plan_tasks_per_h = bound.plan_tasks_per_h
        self.step_s = bound.lp_step_min * 60.0

    def _target_per_h(self, at_s: float) -> float:
        step = min(max(0, int(at_s // self.step_s)), len(self.plan_tasks_per_h) - 1)
        return float(self.plan_tasks_per_h[step]) * self.headroom

    def decide(self, view: WorldView) -> Sequence[Action]:
        engine, now = self.engine, view.now_s
        actions: list[Action] = []
        doomed: set[int] = set()
        for machine in engine.machines.values():
            broken = machine.state in (MachineState.EXITED, MachineState.OFFLINE)
            never = machine.state is MachineState.LOADING and math.isinf(machine.schedule.ready_at_s)
            if broken or never:
                actions.append(Remove(machine.instance_id, "destroy", "failed"))
                doomed.add(machine.instance_id)
        registration_s = engine.world.registration_s

        def capacity_at(at_s: float) -> float:
            total = 0.0
            for m in engine.machines.values():
                if m.instance_id in doomed or m.state not in (MachineState.PRODUCING, MachineState.LOADING):
                    continue
                if m.schedule.ready_at_s <= at_s < m.schedule.offline_at_s:
                    total += m.tasks_per_h
            return total

        # launch the next draws one by one while the plan needs capacity when each would arrive
        best_rate = engine.market.offers[0].reference_tasks_per_h if engine.market.offers else 1.0
        added: list[tuple[float, float]] = []  # (ready at, tasks/h) of launches decided now
        index = engine._launch_index
        while len(added) < 200:
            draw = engine.draws[index]
            arrives_s = now + draw.startup_s + registration_s
            when = arrives_s + self.decision_interval_s
            have = capacity_at(when) + sum(rate for ready, rate in added if ready <= when)
            if self._target_per_h(when) <= have + 1e-6:
                break
            rate = 0.0 if draw.fate in (Fate.STUCK_LOADING, Fate.EXIT_ERROR) else best_rate
            if draw.fate is Fate.SLOW:
                rate *= draw.slow_factor
            added.append((arrives_s, rate))
            index += 1
        if added:
            actions.append(Launch(len(added)))
        # give back what the plan no longer needs, unless a queue is still waiting or it is needed again soon
        if view.pending_tasks >= 1:
            return actions
        lead_s = engine.draws[index].startup_s + registration_s
        surplus = capacity_at(now) - self._target_per_h(now)
        for machine in sorted(engine.producing_order, key=lambda m: -m.price_usd_per_h / m.tasks_per_h):
            if surplus - machine.tasks_per_h < -1e-6:
                continue
            if self._target_per_h(now + lead_s) > capacity_at(now + lead_s) - machine.tasks_per_h:
                continue  # needed again before a replacement could arrive
            actions.append(Remove(machine.instance_id, "drain", "over_provisioned"))
            surplus -= machine.tasks_per_h
        return actions
