"""FleetPilot's own policy in the world: the real demand and fleet cores, trigger scheduler, policy and guardrails.

A thin adapter. Every simulated minute it tells the cores what the job system and the provisioner would have
said (aggregated task counts and a queue snapshot to demand; instance observations, mapped by the
provisioner's own status rule, to fleet), feeds the triggers they return to the decider's scheduler, and
when the scheduler says a run is due it calls the decider's own step (services/decider/step.plan_run) on fleet's
snapshot and translates its commands into the world's actions. Nothing here decides how many machines to run.

Costs are kept off the per-minute path: the per-worker task events fleet needs go in every `bulk_feed_s`, and
the fleet snapshot (which demand also reads) is rebuilt for a run only when something it shows has changed.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import numpy as np

from services.decider.guardrails import GuardrailConfig, SentLaunch, worst_price_usd_per_h
from services.decider.policy import PolicyConfig, PredictivePolicy
from services.decider.step import RunPlan, plan_run
from services.decider.triggering import RunBatch, TriggerConfig, TriggerScheduler
from services.demand.config import DemandSettings
from services.demand.core import DemandCore, machine_producer
from services.demand.records import TaskCounts
from services.fleet.config import FleetSettings
from services.fleet.core import FleetCore, Transition
from services.provisioner.reconcile import observed_state
from shared import gpu_models
from shared.contract import Action as ActionCommand
from shared.contract import (
    DemandSignal,
    DestroyInstance,
    DrainInstance,
    FailureReason,
    FleetSnapshot,
    GuardrailVerdict,
    InstanceObserved,
    InstanceState,
    LaunchInstances,
    ParkReason,
    QueueDepth,
    QueueSnapshot,
    RemovalReason,
    ResumeInstance,
    StopInstance,
    TaskEvent,
    TriggerRef,
)
from shared.lifecycle import advance
from shared.settings import Settings
from sim.vast.scenario import Scenario
from sim.world.model import EPOCH, Action, Launch, MachineState, Remove, Resume, WorldConfig, WorldView
from sim.world.trace import Trace

# guardrails scaled to a trace allow this many times the catalog machines its busiest hour needs
TRACE_HEADROOM = 1.5
TASK_TYPE = "default"
SOURCE_JOBS = "job-system"
SOURCE_PROVISIONER = "provisioner"


def default_guardrails(world: WorldConfig, scenario: Scenario, trace: Trace | None = None) -> GuardrailConfig:
    """The shared settings' guardrails, scaled to the world's size, or to the trace's when it is given.

    The defaults (40 instances, as many launches per hour, $20/h) are for a small fleet; the world keeps their
    ratios: launches per hour at the instance cap (a cold start reaches its fleet within one startup). Without
    a trace the cap is the world's (or the market) and the budget one the cap binds first. With one, the cap
    is TRACE_HEADROOM times the catalog machines its busiest hour needs (at least the defaults' 40) and the
    budget the defaults' $0.50 per allowed instance: a fleet of dearer or slower machines meets it at the peak.
    """
    settings = Settings()
    market = sum(segment.count for segment in scenario.market) + len(scenario.offers)
    max_instances = max(1, min(world.max_instances, market))
    budget_usd_per_h = max_instances * settings.emergency_max_price_usd_per_h
    if trace is not None:
        peak_machines = trace.peak_tasks_per_h / gpu_models.REFERENCE_TASKS_PER_H_RTX_4090
        max_instances = min(max_instances, max(settings.max_instances, math.ceil(TRACE_HEADROOM * peak_machines)))
        budget_usd_per_h = max_instances * settings.budget_usd_per_h / max(1, settings.max_instances)
    return GuardrailConfig(
        budget_usd_per_h=budget_usd_per_h,
        max_instances=max_instances,
        normal_max_price_usd_per_h=settings.normal_max_price_usd_per_h,
        emergency_max_price_usd_per_h=settings.emergency_max_price_usd_per_h,
        max_launches_per_h=max_instances,
    )


@dataclass
class _Reported:
    """What the job system and the provisioner have told the cores about one machine so far."""

    state: InstanceState | None = None
    last_task_s: float | None = None
    gpu_model: str = ""
    price_usd_per_h: float = 0.0
    interruptible: bool = False  # a bid: the provisioner maps vast's `is_bid`


# workers per GPU model whose every completion demand receives as a task event (see _feed_sampled_completions)
SAMPLED_WORKERS_PER_MODEL = 2


@dataclass
class _SampledWorker:
    gpu_model: str
    started: float  # the machine's tasks started, as of `at_s`
    at_s: float
    completions: deque[float] = field(default_factory=deque)  # when its started tasks complete, in order


@dataclass
class _Carry:
    """Float task counts from the fluid world, handed to the cores as integers without losing remainders."""

    cumulative: dict[str, float] = field(default_factory=dict)
    fed: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, amount: float) -> float:
        self.cumulative[key] = self.cumulative.get(key, 0.0) + amount
        return self.cumulative[key]

    def take(self, key: str, cumulative: float) -> int:
        whole = math.floor(cumulative + 1e-9)
        delta = whole - self.fed.get(key, 0)
        self.fed[key] = whole
        return max(0, delta)


class DeciderRun(NamedTuple):
    """One run of the decider in the world: the triggers it took, the step's plan, the snapshot it read."""

    batch: RunBatch
    plan: RunPlan
    snapshot: FleetSnapshot


class PredictiveAdapter:
    name = "predictive"
    runs_guardrails = True  # every action goes through the decider's guardrails here, as the runner does
    decision_interval_s = 60.0  # the job system's queue snapshots and demand's counting buckets are per minute

    def __init__(
        self,
        guardrails: GuardrailConfig,
        policy: PolicyConfig | None = None,
        triggers: TriggerConfig | None = None,
        demand: DemandSettings | None = None,
        fleet: FleetSettings | None = None,
        bulk_feed_s: float = 300.0,
    ) -> None:
        self.guardrails = guardrails
        self.policy = PredictivePolicy(policy or PolicyConfig())
        self.scheduler = TriggerScheduler.starting(triggers or TriggerConfig(), EPOCH)
        self.demand = DemandCore(demand)
        self.fleet = FleetCore(fleet)
        self.bulk_feed_s = bulk_feed_s
        self.reported: dict[int, _Reported] = {}
        self.removal_reasons: dict[int, RemovalReason] = {}  # the latest stop or destroy sent, per machine
        self.carry = _Carry()
        self.sent: list[SentLaunch] = []
        self.signal: DemandSignal | None = None
        self.last_bulk_s = -math.inf
        self.task_seq = 0
        self.sampled: dict[int, _SampledWorker] = {}
        self.sampled_completions: Counter[str] = Counter()
        # by GPU model: tasks started and worker-seconds busy at the last count, and the busy seconds per task then
        self._busy_carry: dict[str, tuple[float, float, float]] = {}
        self.producing_ids: set[int] = set()
        self.new_producers = True  # producers may have come that the sample has room for
        self.runs = 0
        self.run_labels: Counter[str] = Counter()
        self.policy_ms: list[float] = []
        self.snapshot_ms: list[float] = []
        self.refusals: Counter[str] = Counter()
        # (simulated s, guardrail rule, machines not launched) for every launch a rule refused or trimmed
        self.launch_refusals: list[tuple[float, str, int]] = []
        self.removals: Counter[str] = Counter()
        self.runs_at_1000: list[float] = []  # policy ms of runs that saw at least 1000 instances
        self.explanations: list[tuple[float, str]] = []
        self._snapshot: FleetSnapshot | None = None
        self._tasks_fed = False
        self._now = EPOCH

    # --- the world's tick --------------------------------------------------------------------------------------

    def decide(self, view: WorldView) -> Sequence[Action]:
        now = self._now = EPOCH + timedelta(seconds=view.now_s)
        if not self.reported:
            self._warm_up(view)
        self._feed_demand(view, now)
        refs = self._observe_instances(view, now)
        if view.now_s - self.last_bulk_s >= self.bulk_feed_s:
            refs += self._feed_tasks(view, now)
        tick = self.fleet.check(now)
        refs += self._refs(tick.transitions)
        refs += [TriggerRef(priority="p0", reason=alert.reason) for alert in tick.alerts]
        evaluation = self.demand.evaluate(now)
        refs += [TriggerRef(priority=t.priority, reason=t.reason) for t in evaluation.triggers]
        run = self.run_if_due(refs, evaluation.signal, now)
        if run is None:
            return []
        # demand reads fleet's published snapshot; runs come at least every heartbeat, inside its staleness limit
        self.demand.observe_fleet(run.snapshot, now)
        return self._world_actions(run.plan, view)

    def run_if_due(self, refs: Sequence[TriggerRef], signal: DemandSignal, now: datetime) -> DeciderRun | None:
        """The triggers to the decider's scheduler; when it says a run is due, the decider's step on fleet's
        snapshot and demand's latest signal (None: no run due)."""
        self.signal = signal
        for ref in refs:
            self.scheduler.offer(ref, now)
        batch = self.scheduler.poll(now)
        if batch is None:
            return None
        self.scheduler.begin(batch, now)
        try:
            snapshot = self._fresh_snapshot(now)
            return DeciderRun(batch, self._plan(now, snapshot), snapshot)
        finally:
            self.scheduler.finish(now)
            self.runs += 1
            self.run_labels[batch.label] += 1

    def _warm_up(self, view: WorldView) -> None:
        """FleetPilot ran before t=0 too: demand gets the hour before (the world's prehistory, served at once by
        the initial fleet), so the first runs do not decide from empty windows."""
        history = view.prehistory_arrivals_per_min
        initial = [m for m in view.machines if m.state is MachineState.PRODUCING]
        if not history or not initial:
            return
        gpu_model = Counter(m.gpu_model for m in initial).most_common(1)[0][0]
        producers = tuple(machine_producer(m.instance_id) for m in initial)
        for minute in range(-60, 0):
            n = history[minute % len(history)]
            at = EPOCH + timedelta(seconds=minute * 60 + 30)
            counts = TaskCounts(
                at=at, task_type=TASK_TYPE, submitted=n, started=n, completed=n, duration_sum_s=n * view.task_s,
                durations=n, gpu_model=gpu_model, producers=producers if minute >= -15 else (),
            )  # fmt: skip
            self.demand.ingest_counts(counts, at)

    # --- what the job system says: aggregated counts per minute to demand, a queue snapshot to both ----------

    def _feed_demand(self, view: WorldView, now: datetime) -> None:
        at = now - timedelta(seconds=30)  # inside the minute that just ended
        self.demand.ingest_counts(
            TaskCounts(
                at=at,
                task_type=TASK_TYPE,
                submitted=self.carry.take("submitted", view.arrivals_total),
                started=self.carry.take("started", view.started_total),
            ),
            now,
        )
        sampled = self._feed_sampled_completions(view, now)
        completed_share = view.completed_total / view.started_total if view.started_total > 0 else 0.0
        for gpu_model, started in sorted(view.started_by_gpu_model.items()):
            busy_s_per_task = self._busy_s_per_task(gpu_model, started, view.busy_s_by_gpu_model[gpu_model])
            # a task completes one duration after it starts: each model's share of the completions so far, less
            # those its sampled workers reported one by one
            whole = math.floor(started * completed_share + 1e-9) - sampled[gpu_model]
            key = f"completed:{gpu_model}"
            completed = whole - self.carry.fed.get(key, 0)
            if completed <= 0:
                continue
            self.carry.fed[key] = whole
            self.demand.ingest_counts(
                TaskCounts(
                    at=at,
                    task_type=TASK_TYPE,
                    completed=completed,
                    duration_sum_s=completed * view.task_s,
                    durations=completed,
                    busy_completions=completed if busy_s_per_task else 0,
                    busy_s=completed * busy_s_per_task,
                    gpu_model=gpu_model,
                ),
                now,
            )
        queue = QueueSnapshot(
            occurred_at=now,
            source=SOURCE_JOBS,
            queues=[
                QueueDepth(task_type=TASK_TYPE, pending=round(view.pending_tasks), running=round(view.running_tasks))
            ],
        )
        self.demand.observe_queue(queue, now)
        self.fleet.observe_queue(queue, now)

    def _busy_s_per_task(self, gpu_model: str, started: float, busy_s: float) -> float:
        """The worker-seconds a task of this model took lately, over all its producers: what the job system's
        counts say of the workers that are not sampled (0 until one started a task).

        In production every worker reports every task, so demand measures a model's pace over all of them; two
        sampled workers alone read a model 17 % slower whenever one of them was a slow machine, and the fleet
        sized on that swung by a fifth (a diurnal train trace: 41 machines needed, then 65 at 125 tasks/h in place
        of 154, resumes and launches given back within the hour)."""
        last_started, last_busy_s, per_task_s = self._busy_carry.get(gpu_model, (0.0, 0.0, 0.0))
        if started > last_started and busy_s > last_busy_s:
            per_task_s = (busy_s - last_busy_s) / (started - last_started)
            self._busy_carry[gpu_model] = (started, busy_s, per_task_s)
        return per_task_s

    def _feed_sampled_completions(self, view: WorldView, now: datetime) -> Counter[str]:
        """Every completion of a few producing workers per GPU model, as the job system reports them: task events
        through demand's own duplicate check and busy-time throughput estimator, at the machines' real pace.

        Each worker's starts are spread over the minute as its started count grew, and complete one task
        duration later. Reporting every task of a 1000-machine fleet would be ~2000 events a simulated minute;
        the estimator measures a worker's pace while it had work, so a sample of workers per model shows it.
        Returns the completions reported so far, by GPU model (the aggregated counts leave them out).
        """
        producing_ids = self._producing_ids(view)
        stopped = [i for i in self.sampled if i not in producing_ids]
        for instance_id in stopped:
            del self.sampled[instance_id]
        if stopped or self.new_producers:  # otherwise the scan below finds what it found last time: nobody
            self.new_producers = False
            members: Counter[str] = Counter(worker.gpu_model for worker in self.sampled.values())
            for instance_id in sorted(producing_ids):
                machine = view.machines_by_id[instance_id]
                if instance_id not in self.sampled and members[machine.gpu_model] < SAMPLED_WORKERS_PER_MODEL:
                    self.sampled[instance_id] = _SampledWorker(machine.gpu_model, machine.tasks_started, view.now_s)
                    members[machine.gpu_model] += 1
        for instance_id, worker in self.sampled.items():
            started = view.machines_by_id[instance_id].tasks_started
            if started > worker.started:
                span_s = view.now_s - worker.at_s
                for task in range(math.floor(worker.started) + 1, math.floor(started) + 1):
                    started_s = worker.at_s + (task - worker.started) / (started - worker.started) * span_s
                    worker.completions.append(started_s + view.task_s)
            worker.started, worker.at_s = started, view.now_s
            while worker.completions and worker.completions[0] <= view.now_s:
                self.task_seq += 1
                event = TaskEvent(
                    event_id=f"world-task-{self.task_seq}",
                    occurred_at=EPOCH + timedelta(seconds=worker.completions.popleft()),
                    source=SOURCE_JOBS,
                    kind="completed",
                    task_id=f"task-{self.task_seq}",
                    task_type=TASK_TYPE,
                    worker_id=f"worker-{instance_id}",
                    instance_id=instance_id,
                    gpu_model=worker.gpu_model,
                    duration_s=view.task_s,
                )
                self.demand.ingest(event, now)
                self.sampled_completions[worker.gpu_model] += 1
        return self.sampled_completions

    def _producing_ids(self, view: WorldView) -> set[int]:
        """Producing machines, kept from the world's events rather than a scan of every machine each minute."""
        if not self.reported:
            self.producing_ids = {m.instance_id for m in view.machines if m.state is MachineState.PRODUCING}
        for event in view.events:
            if event.kind == "producing":
                self.producing_ids.add(event.instance_id)
                self.new_producers = True
            elif event.kind in ("offline", "gone", "exited"):
                self.producing_ids.discard(event.instance_id)
        self.producing_ids &= view.machines_by_id.keys()
        return self.producing_ids

    # --- what the provisioner says: vast's status, mapped by the provisioner's own rule -----------------------

    def _observe_instances(self, view: WorldView, now: datetime) -> list[TriggerRef]:
        """The provisioner's reports for what changed since the last tick (all machines, the first time)."""
        refs: list[TriggerRef] = []
        if not self.reported:
            for machine in view.machines:
                refs += self._report(machine.instance_id, "created", machine.created_s, view, now)
                if machine.running_s is not None:
                    refs += self._report(machine.instance_id, "running", machine.running_s, view, now)
        for event in view.events:
            refs += self._report(event.instance_id, event.kind, event.at_s, view, now)
        return refs

    def _report(self, instance_id: int, kind: str, at_s: float, view: WorldView, now: datetime) -> list[TriggerRef]:
        machine = view.machines_by_id.get(instance_id)
        if kind == "created" and machine is not None:
            reported = self.reported.setdefault(instance_id, _Reported())
            reported.gpu_model, reported.price_usd_per_h = machine.gpu_model, machine.price_usd_per_h
            reported.interruptible = machine.bid_usd_per_h is not None
        reported_or_none = self.reported.get(instance_id)
        if reported_or_none is None:
            return []
        reported = reported_or_none
        if kind == "gone":
            del self.reported[instance_id]
            removal = self.removal_reasons.pop(instance_id, None)
            return self._tell(instance_id, reported, (InstanceState.GONE, None), at_s, None, now, removal=removal)
        if kind in ("parked", "outbid", "resuming"):
            # what the provisioner reports of our stop for parking, of an outbid pause and of a start
            # (services/provisioner/reconcile.lifecycle_of)
            waking = InstanceState.RESUMING if kind == "resuming" else InstanceState.PARKED
            park_reason = {"parked": ParkReason.STOPPED, "outbid": ParkReason.OUTBID}.get(kind)
            return self._tell(
                instance_id, reported, (waking, None), at_s, "stopped", now, view.disk_usd_per_h, park_reason
            )
        actual = VAST_STATUS_OF.get(kind)
        if actual is None:
            return []  # producing: vast still says running; fleet learns it from the worker's tasks
        state = observed_state(actual, None, EXIT_MESSAGE if actual == "exited" else None, reported.state)
        if state[0] is reported.state:
            return []
        return self._tell(instance_id, reported, state, at_s, actual, now)

    def _tell(
        self,
        instance_id: int,
        reported: _Reported,
        state: tuple[InstanceState, FailureReason | None],
        at_s: float,
        actual: str | None,
        now: datetime,
        disk_usd_per_h: float | None = None,
        park_reason: ParkReason | None = None,
        *,
        removal: RemovalReason | None = None,
    ) -> list[TriggerRef]:
        if advance(reported.state, state[0]) is not state[0]:
            return []  # no move of vast's view of the lifecycle: the provisioner keeps what it reported
        reported.state = state[0]
        return self.observe_instance(
            InstanceObserved(
                occurred_at=EPOCH + timedelta(seconds=at_s),
                source=SOURCE_PROVISIONER,
                instance_id=instance_id,
                state=state[0],
                failure_reason=state[1],
                park_reason=park_reason,
                gpu_model=reported.gpu_model or None,
                price_usd_per_h=reported.price_usd_per_h,
                storage_usd_per_h=disk_usd_per_h,
                vast_actual_status=actual,
                interruptible=reported.interruptible,
                removal_reason=removal,
            ),
            now,
        )

    def observe_instance(self, observed: InstanceObserved, now: datetime) -> list[TriggerRef]:
        """What the provisioner reports, to fleet's core; the triggers fleet would publish for it."""
        return self._refs(self.fleet.observe_instance(observed, now))

    # --- every few minutes: each worker's latest completion to fleet, fleet's snapshot to demand --------------

    def _feed_tasks(self, view: WorldView, now: datetime) -> list[TriggerRef]:
        self.last_bulk_s = view.now_s
        self._tasks_fed = True
        refs: list[TriggerRef] = []
        producers: dict[str, list[str]] = {}
        for machine in view.machines:
            reported = self.reported.get(machine.instance_id)
            if reported is None or machine.last_task_s is None:
                continue
            if reported.last_task_s is not None and machine.last_task_s <= reported.last_task_s:
                continue
            reported.last_task_s = machine.last_task_s
            worker_id = f"worker-{machine.instance_id}"
            producers.setdefault(machine.gpu_model, []).append(machine_producer(machine.instance_id))
            self.task_seq += 1
            # validated like any event (pydantic's validation is faster than its model_construct, too)
            event = TaskEvent(
                event_id=f"world-task-{self.task_seq}",
                occurred_at=EPOCH + timedelta(seconds=machine.last_task_s),
                source=SOURCE_JOBS,
                kind="completed",
                task_id=f"task-{self.task_seq}",
                task_type=TASK_TYPE,
                worker_id=worker_id,
                instance_id=machine.instance_id,
                gpu_model=machine.gpu_model,
                duration_s=view.task_s,
            )
            if transitions := self.fleet.observe_task(event, now):  # most completions move nothing
                refs += self._refs(transitions)
        # demand keeps the workers that produced within its shortest window (15 min)
        at = now - timedelta(seconds=30)
        for gpu_model, ids in sorted(producers.items()):
            self.demand.ingest_counts(
                TaskCounts(at=at, task_type=TASK_TYPE, gpu_model=gpu_model, producers=tuple(ids)), now
            )
        return refs

    def _fresh_snapshot(self, now: datetime) -> FleetSnapshot:
        """What fleet answers a snapshot request with; rebuilt only when something it shows has changed."""
        if self._snapshot is None or self.fleet.changed or self._tasks_fed:
            wall_start = time.perf_counter()
            self._snapshot = self.fleet.snapshot(now)
            self.snapshot_ms.append((time.perf_counter() - wall_start) * 1000)
            self._tasks_fed = False
        return self._snapshot

    @staticmethod
    def _refs(transitions: list[Transition]) -> list[TriggerRef]:
        """The triggers fleet publishes with these transitions: the ones its core returned with each."""
        return [TriggerRef(priority=t.trigger_priority, reason=t.trigger_reason) for t in transitions]

    # --- one decider run: the decider's own step (services/decider/step.py), as the runner calls it ------------

    def _plan(self, now: datetime, snapshot: FleetSnapshot) -> RunPlan:
        wall_start = time.perf_counter()
        plan = plan_run(
            self.signal, snapshot, self.sent, now, self.policy, self.guardrails, run_id=f"world-{self.runs}"
        )
        if plan.policy_error is not None:
            raise plan.policy_error  # a policy bug must stop a measurement, not hold through it
        self.sent = list(plan.ledger.launches)
        elapsed_ms = (time.perf_counter() - wall_start) * 1000
        self.policy_ms.append(elapsed_ms)
        if len(snapshot.instances) >= 1000:
            self.runs_at_1000.append(elapsed_ms)
        if plan.recommendation is not None and not plan.recommendation.is_hold:
            self.explanations.append(((now - EPOCH).total_seconds(), plan.recommendation.explanation))
        return plan

    def _world_actions(self, plan: RunPlan, view: WorldView) -> list[Action]:
        """The plan's verdicts counted for the report, its commands as the world's actions (drains told to fleet,
        as the decider's drain command is)."""
        for asked, verdict in zip(plan.actions, plan.verdicts, strict=True):
            self._count(asked, verdict, view.now_s)
        actions: list[Action] = []
        for command in plan.commands:
            actions.append(self._world_action(command))
            if isinstance(command, DrainInstance):
                self.fleet.drain(command, self._now)
        return actions

    def _count(self, asked: ActionCommand, verdict: GuardrailVerdict, now_s: float) -> None:
        """A verdict in the report: the rule that refused or trimmed it, machines not launched, what was removed."""
        granted = verdict.action
        if verdict.rule:
            self.refusals[verdict.rule] += 1
            if isinstance(asked, LaunchInstances):
                count = granted.count if verdict.verdict == "allowed" and isinstance(granted, LaunchInstances) else 0
                if count < asked.count:
                    self.launch_refusals.append((now_s, str(verdict.rule), asked.count - count))
        if verdict.verdict != "allowed":
            return
        if isinstance(granted, ResumeInstance):
            self.removals["resume"] += 1
        elif isinstance(granted, DrainInstance):
            self.removals[f"drain:{granted.reason.value}"] += 1
        elif isinstance(granted, StopInstance | DestroyInstance):
            self.removals[f"destroy:{granted.reason.value}"] += 1

    def _world_action(self, command: ActionCommand) -> Action:
        if isinstance(command, LaunchInstances):
            return Launch(
                command.count,
                tuple(command.gpu_models),
                command.reason.value,
                worst_price_usd_per_h(command, self.guardrails),
                interruptible=command.interruptible,
                bid_markup=command.bid_markup,
                urgent=command.launch_priority == "emergency",  # as the provisioner ranks it
            )
        if isinstance(command, ResumeInstance):
            return Resume(command.instance_id, command.reason.value)
        if isinstance(command, DrainInstance):
            return Remove(command.instance_id, "drain", command.reason.value)
        # as the provisioner tells fleet: a machine our command removed is gone with that command's reason
        self.removal_reasons[command.instance_id] = command.reason
        if isinstance(command, StopInstance):
            return Remove(command.instance_id, "stop", command.reason.value)
        return Remove(command.instance_id, "destroy", command.reason.value)

    def fleet_now(self) -> datetime:
        """The moment of the last decision, on the cores' clock (for inspecting them after a run)."""
        return self._now

    # --- for the report ----------------------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        def pct(values: list[float], q: float) -> float:
            return round(float(np.percentile(values, q)), 3) if values else 0.0

        return {
            "decider_runs": self.runs,
            "decider_runs_by_label": dict(self.run_labels),
            "decider_runs_suppressed": sum(self.scheduler.suppressed_runs.values()),
            "policy_ms_per_decision_p50": pct(self.policy_ms, 50),
            "policy_ms_per_decision_p99": pct(self.policy_ms, 99),
            "fleet_snapshot_ms_p50": pct(self.snapshot_ms, 50),
            "fleet_snapshot_ms_p99": pct(self.snapshot_ms, 99),
            "policy_ms_at_1000_instances_p50": pct(self.runs_at_1000, 50),
            "policy_ms_at_1000_instances_p99": pct(self.runs_at_1000, 99),
            "decider_runs_at_1000_instances": len(self.runs_at_1000),
            "guardrail_verdict_rules": dict(self.refusals),
            "removals_by_reason": dict(self.removals),
        }


# what vast's API shows after each of the world's machine events (the provisioner maps it with observed_state)
VAST_STATUS_OF = {"created": "loading", "running": "running", "exited": "exited", "offline": "offline"}
EXIT_MESSAGE = "Error: the container exited during start"
