"""An achievable clairvoyant run: follow the bound's relaxed capacity plan knowing every machine's future.

The bound (sim/world/bound.py) is a proven floor; this is a ceiling on the optimum: a real run in the world
by a policy that may read what no real policy can (the trace ahead, each launch's startup time and fate, and
with parking each resume's luck). The best achievable objective lies between the two, which says how loose the
bound is on a trace.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from sim.vast.scenario import Fate
from sim.world.bound import BoundResult
from sim.world.engine import Engine
from sim.world.model import Action, Launch, Machine, MachineState, Remove, Resume, WorldView

# how many plan steps ahead a parking decision looks at most (a week of 5-minute steps is ~2000)
PARK_LOOKAHEAD_STEPS_MAX = 288


class ClairvoyantPlan:
    name = "clairvoyant-plan"
    decision_interval_s = 60.0

    def __init__(self, engine: Engine, bound: BoundResult, headroom: float = 1.0, park: bool = False) -> None:
        self.engine = engine  # privileged: the schedule of every machine and the fate of the next launch
        self.headroom = headroom  # the plan is fluid and fractional; whole machines and FIFO waits need a little
        self.plan_tasks_per_h = bound.plan_tasks_per_h
        self.step_s = bound.lp_step_min * 60.0
        # vast's stop and start: a machine the plan gives up and wants back before its disk costs more than a new
        # startup is parked, and parked machines are resumed (when their GPU is free) before anything is launched
        self.park = park

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
            stuck = machine.state is MachineState.RESUMING and math.isinf(machine.resume_ready_s)  # GPU taken for good
            if broken or never or stuck:
                actions.append(Remove(machine.instance_id, "destroy", "failed"))
                doomed.add(machine.instance_id)
        registration_s = engine.world.registration_s

        def capacity_at(at_s: float) -> float:
            total = 0.0
            for m in engine.machines.values():
                if m.instance_id in doomed:
                    continue
                if m.state in (MachineState.PRODUCING, MachineState.LOADING):
                    ready_s = m.schedule.ready_at_s
                elif m.state is MachineState.RESUMING:
                    ready_s = m.resume_ready_s
                else:
                    continue
                if ready_s <= at_s < m.schedule.offline_at_s:
                    total += m.tasks_per_h
            return total

        added: list[tuple[float, float]] = []  # (ready at, tasks/h) of resumes and launches decided now
        parked = self._parked() if self.park else []
        if parked:
            parked = self._resume_parked(now, parked, capacity_at, added, actions)
        # launch the next draws one by one while the plan needs capacity when each would arrive
        best_rate = engine.market.offers[0].reference_tasks_per_h if engine.market.offers else 1.0
        # parked machines can be resumed in minutes whenever the plan needs them: no launch for what they cover
        parked_rate = sum(m.tasks_per_h for m in parked)
        launched = 0
        index = engine._launch_index
        while launched < 200:
            draw = engine.draws[index]
            arrives_s = now + draw.startup_s + registration_s
            when = arrives_s + self.decision_interval_s
            have = capacity_at(when) + sum(rate for ready, rate in added if ready <= when) + parked_rate
            if self._target_per_h(when) <= have + 1e-6:
                break
            rate = 0.0 if draw.fate in (Fate.STUCK_LOADING, Fate.EXIT_ERROR) else best_rate
            if draw.fate is Fate.SLOW:
                rate *= draw.slow_factor
            added.append((arrives_s, rate))
            launched += 1
            index += 1
        if launched:
            actions.append(Launch(launched))
        # give back what the plan no longer needs, unless a queue is still waiting or it is needed again soon
        if view.pending_tasks >= 1:
            return actions
        lead_s = engine.draws[index].startup_s + registration_s
        if self.park:
            # the fleet does not change within a decision: each future moment is summed once for every machine
            actions += self._park_or_give_back(now, lead_s, parked, functools.cache(capacity_at))
            return actions
        surplus = capacity_at(now) - self._target_per_h(now)
        for machine in sorted(engine.producing_order, key=lambda m: -m.price_usd_per_h / m.tasks_per_h):
            if surplus - machine.tasks_per_h < -1e-6:
                continue
            if self._target_per_h(now + lead_s) > capacity_at(now + lead_s) - machine.tasks_per_h:
                continue  # needed again before a replacement could arrive
            actions.append(Remove(machine.instance_id, "drain", "over_provisioned"))
            surplus -= machine.tasks_per_h
        return actions

    # --- parking -------------------------------------------------------------------------------------------------

    def _parked(self) -> list[Machine]:
        """Machines parked by our stop (an outbid one starts when its bid wins), the most recently parked first:
        their GPUs are the least likely to have been rented meanwhile."""
        parked = [m for m in self.engine.machines.values() if m.state is MachineState.PARKED and not m.outbid]
        return sorted(parked, key=lambda m: -m.state_since_s)

    def _resume_lead_s(self) -> float:
        return self.engine.scenario.startup.restart_s + self.engine.world.registration_s

    def _resume_parked(
        self,
        now: float,
        parked: list[Machine],
        capacity_at: Callable[[float], float],
        added: list[tuple[float, float]],
        actions: list[Action],
    ) -> list[Machine]:
        """Resume parked machines while the plan needs them once they could produce; a machine whose GPU the
        engine's next resume draw says is taken is given back instead (it would wait in scheduling)."""
        engine = self.engine
        when = now + self._resume_lead_s() + self.decision_interval_s
        kept: list[Machine] = []
        resumes = 0
        for machine in parked:
            have = capacity_at(when) + sum(rate for ready, rate in added if ready <= when)
            if self._target_per_h(when) <= have + 1e-6:
                kept.append(machine)
                continue
            draw = engine.resume_draws.draw(engine.resumes + resumes, now - machine.state_since_s)
            if draw.gpu_taken:
                actions.append(Remove(machine.instance_id, "destroy", "gpu_taken"))
                continue
            actions.append(Resume(machine.instance_id, "plan"))
            added.append((now + self._resume_lead_s(), machine.tasks_per_h))
            resumes += 1
        return kept

    def _park_horizon_s(self, machine: Machine, lead_s: float) -> float:
        """How long a parked machine's disk costs less than the startup a new machine would be billed."""
        engine = self.engine
        disk_usd_per_h = engine.storage_usd_per_h
        billed_startup_s = lead_s if engine.world.billed_from == "created" else engine.world.registration_s
        startup_usd = (machine.price_usd_per_h * billed_startup_s + disk_usd_per_h * lead_s) / 3600.0
        resume_usd = (machine.price_usd_per_h + disk_usd_per_h) * engine.world.registration_s / 3600.0
        saving_usd = max(0.0, startup_usd - resume_usd)
        return math.inf if disk_usd_per_h <= 0 else saving_usd / disk_usd_per_h * 3600.0

    def _shortfall_per_h(self, from_s: float, to_s: float, capacity_at: Callable[[float], float]) -> float:
        """The most the plan asks beyond the machines held, at any step in [from_s, to_s]."""
        end_s = min(to_s, from_s + PARK_LOOKAHEAD_STEPS_MAX * self.step_s, len(self.plan_tasks_per_h) * self.step_s)
        shortfall, at_s = 0.0, from_s
        while at_s <= end_s:
            shortfall = max(shortfall, self._target_per_h(at_s) - capacity_at(at_s))
            at_s += self.step_s
        return shortfall

    def _park_or_give_back(
        self, now: float, lead_s: float, parked: list[Machine], capacity_at: Callable[[float], float]
    ) -> list[Action]:
        """Surplus producers leave as before; each is parked when the plan wants more than the machines held and
        already parked within its park horizon (later than a resume could bring it back), else given back; parked
        machines beyond what the plan will want within their horizon are given back too."""
        engine = self.engine
        actions: list[Action] = []
        resume_lead_s = self._resume_lead_s()
        surplus = capacity_at(now) - self._target_per_h(now)
        removed_rate = parked_now_rate = 0.0
        pool_rate = sum(m.tasks_per_h for m in parked)
        for machine in sorted(engine.producing_order, key=lambda m: -m.price_usd_per_h / m.tasks_per_h):
            if surplus - machine.tasks_per_h < -1e-6:
                continue
            soon = now + resume_lead_s
            if self._target_per_h(soon) > capacity_at(soon) - removed_rate - machine.tasks_per_h:
                continue  # needed again before even a resume could bring it back
            surplus -= machine.tasks_per_h
            removed_rate += machine.tasks_per_h
            horizon_s = self._park_horizon_s(machine, lead_s)
            wanted = self._shortfall_per_h(soon, now + horizon_s, capacity_at) + removed_rate
            if wanted > pool_rate + 1e-6:
                actions.append(Remove(machine.instance_id, "stop", "plan_dip"))
                pool_rate += machine.tasks_per_h
                parked_now_rate += machine.tasks_per_h
            else:
                actions.append(Remove(machine.instance_id, "drain", "over_provisioned"))
        if parked:
            horizon_s = self._park_horizon_s(parked[0], lead_s)
            keep_rate = self._shortfall_per_h(now, now + horizon_s, capacity_at) + removed_rate - parked_now_rate
            for machine in parked:  # the most recently parked are kept
                if keep_rate > 1e-6:
                    keep_rate -= machine.tasks_per_h
                else:
                    actions.append(Remove(machine.instance_id, "destroy", "over_provisioned"))
        return actions
