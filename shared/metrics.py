"""Metrics every service shares, on the service's own registry (never the global one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter


@dataclass
class BusMetrics:
    service: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.dead_letters = Counter(
            "fleetpilot_dead_letters_total",
            "Messages rejected to the dead-letter subject, by service and reason",
            ["service", "reason"],
            registry=self.registry,
        )
        self.duplicates_ignored = Counter(
            "fleetpilot_duplicate_events_total",
            "Events ignored because their event_id was already processed",
            ["service"],
            registry=self.registry,
        )
        for reason in ("invalid_message", "handler_failed"):
            self.dead_letters.labels(self.service, reason)
        self.duplicates_ignored.labels(self.service)
