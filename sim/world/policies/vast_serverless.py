"""vast.ai Serverless's autoscaler, as its docs describe it: what a vast.ai user gets without writing a scaler.

Parameters and their source (docs.vast.ai serverless parameters; the CLI's `create endpoint` defaults, noted in
the handbook's vast-api.md §4 and online-scaling.md):
- `target_util` 0.9: hot capacity = measured load ÷ target_util;
- `cold_mult` 2.5: capacity planned for the longer term ("1 hour+"), cold (stopped, model on disk) workers
  included, is cold_mult × the hot target; here the highest hot target of the last hour;
- `cold_workers` 5: at least this many "ready quick" workers (producing or stopped with the model loaded) are
  kept before any worker is destroyed;
- `min_load` 0 (tasks/h here): the hot target's floor;
- `max_workers`: the CLI's default is 20, which would starve every family trace (ordinary peaks of 12-60
  machines); a user sets it to the fleet they allow, so the benchmark passes the guardrails' instance cap, the
  same every policy meets;
- `inactivity_timeout` 0 s: seconds without load before the endpoint may scale to zero hot workers (0 disables
  the gate; the docs give no default, so none is assumed);
- workers are recruited on the best price-performance offer (the provisioner's ranking, which the world rents
  through) and released worst price-performance first (price ÷ measured pace);
- stopped ("inactive") workers are billed for storage only, which the world does for every parked machine.

Not documented, and chosen here: the load is the arrival rate over the last 5 minutes plus the backlog spread
over an hour (target tracking's measure, so the two differ only in their rules); a start that waits for its GPU
longer than fleet's `resume_wait_s` (30 min) is destroyed, as vast shows such a worker in error. The learning
phase (`test_workers`) is left out: the world's machines are benchmarked as they register.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from shared.contract import RemovalReason
from sim.world.model import Action, Launch, MachineState, MachineView, Remove, Resume, WorldView
from sim.world.policies.hygiene import broken_machines

DEFAULT_TASKS_PER_H = 120.0  # DESIGN.md: a reference machine, pipelined, finishes a task every ~30 s


@dataclass(frozen=True)
class VastServerlessConfig:
    decision_interval_s: float = 60.0
    target_util: float = 0.9
    cold_mult: float = 2.5
    cold_workers: int = 5
    min_load_tasks_per_h: float = 0.0
    max_workers: int = 20
    inactivity_timeout_s: float = 0.0
    cold_planning_s: float = 3600.0  # the docs' "longer term planning (1 hour+)"
    load_window_s: float = 300.0
    backlog_drain_s: float = 3600.0
    resume_wait_s: float = 30 * 60.0  # services/fleet's default resume_wait_s


def pace_tasks_per_h(machine: MachineView) -> float:
    """What the autoscaler counts a worker for: its benchmark once it produced, the catalog's pace before."""
    return machine.reference_tasks_per_h if machine.state is MachineState.LOADING else machine.tasks_per_h


def usd_per_task(machine: MachineView) -> float:
    """Price-performance: lower is better."""
    return machine.price_usd_per_h / max(pace_tasks_per_h(machine), 1e-9)


class VastServerlessPolicy:
    name = "vast-serverless"

    def __init__(self, config: VastServerlessConfig = VastServerlessConfig()) -> None:
        self.config = config
        self.decision_interval_s = config.decision_interval_s
        self._hot_targets: deque[tuple[float, float]] = deque()  # (time, hot target tasks/h)
        self._last_load_s = 0.0
        self._stopping: set[int] = set()  # workers this policy stopped that are still draining

    def decide(self, view: WorldView) -> Sequence[Action]:
        actions: list[Action] = [*broken_machines(view), *self._failed_resumes(view)]
        leaving = {action.instance_id for action in actions if isinstance(action, Remove)}
        fleet = [m for m in view.machines if m.instance_id not in leaving]
        self._stopping &= {m.instance_id for m in fleet if m.state is MachineState.DRAINING}
        # serving within minutes: producing, or started again from cold; loading ones are an hour or more away
        serving = [m for m in fleet if m.state in (MachineState.PRODUCING, MachineState.RESUMING)]
        loading = [m for m in fleet if m.state is MachineState.LOADING]
        parked = sorted((m for m in fleet if m.state is MachineState.PARKED), key=usd_per_task)
        # stopped workers still finishing their tasks: cold capacity already, not startable yet
        stopping = [m for m in fleet if m.instance_id in self._stopping]
        hot_target = self.hot_target_tasks_per_h(view)
        planned = self.planned_tasks_per_h(view.now_s, hot_target)
        serving_capacity = _capacity(serving)
        resumes = self._resumes(hot_target - serving_capacity, parked)
        resumed = {resume.instance_id for resume in resumes}
        still_parked = [m for m in parked if m.instance_id not in resumed]
        short = hot_target - serving_capacity - _capacity([m for m in parked if m.instance_id in resumed])
        ready = _capacity([*serving, *loading, *parked, *stopping])
        actions += resumes
        actions += self._recruit(max(short - _capacity(loading), planned - ready), [*serving, *parked], len(fleet))
        if serving_capacity > hot_target:
            releases = self._releases(hot_target, planned, serving, [*loading, *still_parked], stopping)
            self._stopping |= {r.instance_id for r in releases if r.parks}
            actions += releases
        return actions

    def hot_target_tasks_per_h(self, view: WorldView) -> float:
        """Measured load ÷ target_util, at least min_load; kept above zero until the inactivity gate opens."""
        config = self.config
        window_min = max(1, round(config.load_window_s / 60))
        recent = view.arrivals_by_minute[-window_min - 1 : -1] or view.arrivals_by_minute[-1:]
        arrival_per_h = sum(recent) * 60.0 / max(1, len(recent))
        load_per_h = arrival_per_h + view.pending_tasks / (config.backlog_drain_s / 3600.0)
        if load_per_h > 0 or view.running_tasks > 0:
            self._last_load_s = view.now_s
        target = max(load_per_h, config.min_load_tasks_per_h) / config.target_util
        if target <= 0 and view.now_s - self._last_load_s < config.inactivity_timeout_s:
            target = 1e-9  # one worker stays hot until the endpoint has been inactive long enough
        return target

    def planned_tasks_per_h(self, now_s: float, hot_target: float) -> float:
        """cold_mult × the highest hot target of the planning window: hot and cold capacity together."""
        self._hot_targets.append((now_s, hot_target))
        while self._hot_targets[0][0] < now_s - self.config.cold_planning_s:
            self._hot_targets.popleft()
        return self.config.cold_mult * max(target for _, target in self._hot_targets)

    def _failed_resumes(self, view: WorldView) -> list[Remove]:
        return [
            Remove(m.instance_id, "destroy", RemovalReason.FAILED.value)
            for m in view.machines
            if m.state is MachineState.RESUMING and view.now_s - m.state_since_s >= self.config.resume_wait_s
        ]

    def _resumes(self, short: float, parked: list[MachineView]) -> list[Resume]:
        """Cold workers started for the hot target's shortfall, best price-performance first (minutes away)."""
        resumes = []
        for machine in parked:
            if short <= 0:
                break
            resumes.append(Resume(machine.instance_id, "hot_target"))
            short -= pace_tasks_per_h(machine)
        return resumes

    def _recruit(self, lacking: float, ready: list[MachineView], workers: int) -> list[Launch]:
        """New workers for what the hot target or the planned capacity still lacks, within max_workers (a worker
        recruited for the planned capacity goes cold once the hot target no longer needs it)."""
        if lacking <= 0:
            return []
        count = min(math.ceil(lacking / _mean_pace(ready) - 1e-9), self.config.max_workers - workers)
        return [Launch(count, reason="capacity")] if count > 0 else []

    def _releases(
        self,
        hot_target: float,
        planned: float,
        serving: list[MachineView],
        cold: list[MachineView],
        stopping: list[MachineView],
    ) -> list[Remove]:
        """Producers beyond the hot target released, worst price-performance first: stopped while the planned
        capacity wants them cold, destroyed beyond it once cold_workers ready-quick workers are kept; cold
        workers beyond the planned capacity destroyed, worst first, on the same condition. `cold` holds the
        machines loading (which count towards the planned capacity) and the parked ones, best first."""
        actions: list[Remove] = []
        hot_capacity = _capacity(serving)
        ready_capacity = hot_capacity + _capacity([*cold, *stopping])
        parked = [m for m in cold if m.state is MachineState.PARKED]
        ready_quick = sum(1 for m in serving if m.state is MachineState.PRODUCING) + len(parked) + len(stopping)
        producing = sorted((m for m in serving if m.state is MachineState.PRODUCING), key=usd_per_task, reverse=True)
        for machine in producing:
            pace = pace_tasks_per_h(machine)
            if hot_capacity - pace < hot_target:
                break
            hot_capacity -= pace
            if ready_capacity - pace >= planned and ready_quick > self.config.cold_workers:
                actions.append(Remove(machine.instance_id, "destroy", RemovalReason.OVER_PROVISIONED.value))
                ready_capacity -= pace
                ready_quick -= 1
            else:
                actions.append(Remove(machine.instance_id, "stop", RemovalReason.PARK.value))
        for machine in reversed(parked):  # worst price-performance first
            pace = pace_tasks_per_h(machine)
            if ready_capacity - pace < planned or ready_quick <= self.config.cold_workers:
                break
            actions.append(Remove(machine.instance_id, "destroy", RemovalReason.OVER_PROVISIONED.value))
            ready_capacity -= pace
            ready_quick -= 1
        return actions


def _capacity(machines: Sequence[MachineView]) -> float:
    return sum(pace_tasks_per_h(m) for m in machines)


def _mean_pace(machines: Sequence[MachineView]) -> float:
    paces = [pace_tasks_per_h(m) for m in machines]
    return sum(paces) / len(paces) if paces else DEFAULT_TASKS_PER_H
