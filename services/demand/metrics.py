"""demand's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.demand.records import Evaluation, IngestOutcome
from services.demand.task_wait import TaskWaits
from shared.contract import DemandState, TaskEvent

REFUSALS = (IngestOutcome.REPEATED_COMPLETION,)


def window_label(window_s: int) -> str:
    return f"{window_s // 3600}h" if window_s % 3600 == 0 else f"{window_s // 60}m"


class DemandMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.task_events = Counter(
            "fleetpilot_demand_task_events_total",
            "Task events ingested (after de-duplication), by kind",
            ["kind"],
            registry=registry,
        )
        self.refused_events = Counter(
            "fleetpilot_demand_refused_task_events_total",
            "Task events not applied: a completion of a task already counted (a replay under a fresh event id)",
            ["reason"],
            registry=registry,
        )
        self.late_events = Counter(
            "fleetpilot_demand_late_events_total",
            "Task events older than the longest window: counted here and otherwise ignored",
            registry=registry,
        )
        self.arrival_rate = Gauge(
            "fleetpilot_demand_arrival_rate_per_hour", "Task arrivals per hour", ["window"], registry=registry
        )
        self.completion_rate = Gauge(
            "fleetpilot_demand_completion_rate_per_hour", "Task completions per hour", ["window"], registry=registry
        )
        self.sustained_arrival_rate = Gauge(
            "fleetpilot_demand_sustained_arrival_rate_per_hour",
            "The arrival rate that has held over the sustain period",
            registry=registry,
        )
        self.backlog_worker_hours = Gauge(
            "fleetpilot_demand_backlog_worker_hours", "Pending tasks in hours of one worker", registry=registry
        )
        self.pending_tasks = Gauge("fleetpilot_demand_pending_tasks", "Tasks waiting", registry=registry)
        self.running_tasks = Gauge("fleetpilot_demand_running_tasks", "Tasks running", registry=registry)
        self.capacity = Gauge(
            "fleetpilot_demand_capacity_tasks_per_hour", "Producing workers x per-worker throughput", registry=registry
        )
        self.worker_throughput = Gauge(
            "fleetpilot_demand_worker_throughput_tasks_per_hour",
            "Measured tasks per hour of one worker while it has work",
            registry=registry,
        )
        self.producing_workers = Gauge(
            "fleetpilot_demand_producing_workers",
            "Producers (machines where the events name one, else workers) with a completion in the short window",
            registry=registry,
        )
        self.above_capacity = Gauge(
            "fleetpilot_demand_above_capacity_seconds",
            "How long arrivals have exceeded capacity without a break",
            registry=registry,
        )
        self.state = Gauge("fleetpilot_demand_state", "1 for the current demand state", ["state"], registry=registry)
        self.signals_published = Counter(
            "fleetpilot_demand_signals_published_total", "Demand signals published", registry=registry
        )
        self.triggers = Counter(
            "fleetpilot_demand_triggers_total", "Triggers raised", ["priority", "reason"], registry=registry
        )
        self.task_wait = Histogram(
            "fleetpilot_demand_task_wait_seconds",
            "Time from a task's submitted event to its started event (tasks whose submission demand saw)",
            # a task waits seconds while the fleet keeps up, and the 1-2 h a new machine takes when it does not
            buckets=(1, 10, 30, 60, 300, 600, 1800, 3600, 7200, 14400),
            registry=registry,
        )
        self._waits = TaskWaits()
        kinds = ("submitted", "started", "completed", "failed")
        self._by_kind = {kind: self.task_events.labels(kind) for kind in kinds}
        for refusal in REFUSALS:  # at zero from the start: an alert on its rate needs the series
            self.refused_events.labels(refusal.value)

    def ingested(self, event: TaskEvent, outcome: IngestOutcome) -> None:
        """Every event seen for the first time counts; one too late for any window also counts as late, and one
        not applied as refused, by why. A start whose submission was seen measures the task's wait."""
        self._by_kind[event.kind].inc()
        if outcome == IngestOutcome.TOO_LATE:
            self.late_events.inc()
        elif outcome in REFUSALS:
            self.refused_events.labels(outcome.value).inc()
        if event.kind == "submitted":
            self._waits.submitted(event.task_id, event.occurred_at)
        elif event.kind == "started":
            wait_s = self._waits.started(event.task_id, event.occurred_at)
            if wait_s is not None:
                self.task_wait.observe(wait_s)

    def evaluated(self, evaluation: Evaluation) -> None:
        signal = evaluation.signal
        for stats in signal.windows:
            self.arrival_rate.labels(window_label(stats.window_s)).set(stats.arrival_rate_per_h)
            self.completion_rate.labels(window_label(stats.window_s)).set(stats.completion_rate_per_h)
        self.sustained_arrival_rate.set(signal.sustained_arrival_rate_per_h)
        self.backlog_worker_hours.set(signal.backlog_worker_hours)
        self.pending_tasks.set(signal.pending_tasks)
        self.running_tasks.set(signal.running_tasks)
        self.capacity.set(signal.fleet_capacity_tasks_per_h)
        if signal.per_worker_throughput_tasks_per_h is not None:
            self.worker_throughput.set(signal.per_worker_throughput_tasks_per_h)
        self.producing_workers.set(signal.producing_workers)
        self.above_capacity.set(signal.above_capacity_for_s)
        for state in DemandState:
            self.state.labels(state.value).set(1 if state == signal.state else 0)
        if evaluation.publish:
            self.signals_published.inc()
        for trigger in evaluation.triggers:
            self.triggers.labels(trigger.priority, trigger.reason.value).inc()
