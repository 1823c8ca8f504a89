"""demand's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class DemandMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.task_events = Counter(
            "fleetpilot_demand_task_events_total",
            "Task events ingested (after de-duplication), by kind",
            ["kind"],
            registry=registry,
        )
