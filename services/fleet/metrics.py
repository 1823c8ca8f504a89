"""fleet's Prometheus metrics."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge

from services.fleet.core import Transition
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
        self.triggers = Counter(
            "fleetpilot_fleet_triggers_total", "Triggers raised", ["priority", "reason"], registry=registry
        )
        self.snapshots = Counter(
            "fleetpilot_fleet_snapshots_published_total", "Fleet snapshots published", registry=registry
        )
        self._ignored_seen = 0

    def transitioned(self, transition: Transition) -> None:
        self.transitions.labels(transition.to_state.value).inc()

    def ignored(self, total: int) -> None:
        if total > self._ignored_seen:
            self.ignored_moves.inc(total - self._ignored_seen)
            self._ignored_seen = total

    def snapshot(self, snapshot: FleetSnapshot) -> None:
        tally = Tally((line.state.value, line.gpu_model or "unknown") for line in snapshot.instances)
        self.instances.clear()
        for (state, gpu_model), count in tally.items():
            self.instances.labels(state, gpu_model).set(count)
        self.spend.set(snapshot.spend_usd_per_h)
        self.snapshots.inc()
