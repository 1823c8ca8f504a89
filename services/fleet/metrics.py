"""fleet's Prometheus metrics."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from services.fleet.core import Transition
from services.fleet.transitions import TaskEventRefusal
from shared.contract import FleetSnapshot


class FleetMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.instances = Gauge(
            "fleetpilot_fleet_instances",
            "Non-gone instances by lifecycle state and GPU model",
            ["state", "gpu_model"],
            registry=registry,
        )
        self.spend = Gauge(
            "fleetpilot_spend_usd_per_hour",
            "What the non-gone instances cost per hour, as fleet sees them (failed ones bill until destroyed)",
            registry=registry,
        )
        self.transitions = Counter(
            "fleetpilot_fleet_transitions_total", "Lifecycle transitions applied", ["to_state"], registry=registry
        )
        self.ignored_moves = Counter(
            "fleetpilot_fleet_ignored_moves_total",
            "Moves the transition table refused (backwards or sideways): recorded on the instance and ignored",
            registry=registry,
        )
        self.refused_task_events = Counter(
            "fleetpilot_fleet_refused_task_events_total",
            "Task events not applied: a completion of a task already counted (a replay under a fresh event id)",
            ["reason"],
            registry=registry,
        )
        self.triggers = Counter(
            "fleetpilot_fleet_triggers_total", "Triggers raised", ["priority", "reason"], registry=registry
        )
        self.snapshots = Counter(
            "fleetpilot_fleet_snapshots_published_total", "Fleet snapshots published", registry=registry
        )
        self.per_instance = InstanceMetrics(registry)
        self._ignored_seen = 0
        self._refused_seen: dict[TaskEventRefusal, int] = {}
        for reason in TaskEventRefusal:  # at zero from the start: an alert on its rate needs the series
            self.refused_task_events.labels(reason.value)

    def transitioned(self, transition: Transition) -> None:
        self.transitions.labels(transition.to_state.value).inc()

    def ignored(self, total: int) -> None:
        if total > self._ignored_seen:
            self.ignored_moves.inc(total - self._ignored_seen)
            self._ignored_seen = total

    def refused(self, totals: Mapping[TaskEventRefusal, int]) -> None:
        """The core's running totals, turned into counter increments."""
        for reason, total in totals.items():
            seen = self._refused_seen.get(reason, 0)
            if total > seen:
                self.refused_task_events.labels(reason.value).inc(total - seen)
                self._refused_seen[reason] = total

    def snapshot(self, snapshot: FleetSnapshot) -> None:
        tally = Tally((line.state.value, line.gpu_model or "unknown") for line in snapshot.instances)
        self.instances.clear()
        for (state, gpu_model), count in tally.items():
            self.instances.labels(state, gpu_model).set(count)
        self.spend.set(snapshot.spend_usd_per_h)
        self.per_instance.snapshot(snapshot)
        self.snapshots.inc()


class InstanceMetrics:
    """One series per non-gone instance: the on-call table, and an alert that names the machine that is stuck.
    Bounded by FLEETPILOT_MAX_INSTANCES, so the label cannot grow without limit. `instance_id` is vast.ai's id;
    `instance` is taken by Prometheus for the scrape target."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.state_since = Gauge(
            "fleetpilot_fleet_instance_state_since_timestamp_seconds",
            "Unix time the instance entered its current lifecycle state (time() minus this: how long in it)",
            ["instance_id", "state", "gpu_model"],
            registry=registry,
        )
        self.price = Gauge(
            "fleetpilot_fleet_instance_price_usd_per_hour",
            "The instance's full price per hour (what it costs running, or once resumed)",
            ["instance_id", "gpu_model"],
            registry=registry,
        )
        self.storage = Gauge(
            "fleetpilot_fleet_instance_storage_usd_per_hour",
            "The instance's disk per hour, billed even while it is parked (absent when vast.ai did not say)",
            ["instance_id", "gpu_model"],
            registry=registry,
        )
        self.throughput = Gauge(
            "fleetpilot_fleet_instance_throughput_tasks_per_hour",
            "Tasks per hour the instance completes while it has work (absent until measured)",
            ["instance_id", "gpu_model"],
            registry=registry,
        )

    def snapshot(self, snapshot: FleetSnapshot) -> None:
        # cleared first: an instance gone since the last snapshot must leave the table and the stuck alert
        for gauge in (self.state_since, self.price, self.storage, self.throughput):
            gauge.clear()
        for line in snapshot.instances:
            instance_id, gpu_model = str(line.instance_id), line.gpu_model or "unknown"
            self.state_since.labels(instance_id, line.state.value, gpu_model).set(line.state_since.timestamp())
            self.price.labels(instance_id, gpu_model).set(line.price_usd_per_h)
            if line.storage_usd_per_h is not None:
                self.storage.labels(instance_id, gpu_model).set(line.storage_usd_per_h)
            if line.throughput_tasks_per_h is not None:
                self.throughput.labels(instance_id, gpu_model).set(line.throughput_tasks_per_h)
