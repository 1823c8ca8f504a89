"""Metrics every service shares, on the service's own registry (never the global one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge

from shared.contract import DeadLetterReason


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
        self.unknown_fields = Counter(
            "fleetpilot_unknown_fields_total",
            "Fields the job system sent that this FleetPilot does not know, ignored (by message type)",
            ["service", "message"],
            registry=self.registry,
        )
        # JetStream consumer lag, read by shared/consumer_lag.py; absent while unknown
        self.consumer_pending = Gauge(
            "fleetpilot_consumer_pending_messages",
            "Messages in the stream not yet delivered to this durable consumer",
            ["stream", "consumer"],
            registry=self.registry,
        )
        self.consumer_ack_pending = Gauge(
            "fleetpilot_consumer_ack_pending_messages",
            "Messages delivered to this durable consumer and not yet acknowledged",
            ["stream", "consumer"],
            registry=self.registry,
        )
        self.consumer_info_failures = Counter(
            "fleetpilot_consumer_info_failures_total",
            "Consumer lag reads that failed (the lag gauges are then absent, not zero)",
            ["stream", "consumer"],
            registry=self.registry,
        )
        # a request whose reply subject is no inbox (a confused-deputy attempt: "answer into the command stream")
        self.refused_replies = Counter(
            "fleetpilot_refused_replies_total",
            "Requests not answered because their reply subject is not a requester's inbox",
            ["service", "subject"],
            registry=self.registry,
        )
        for reason in get_args(DeadLetterReason):
            self.dead_letters.labels(self.service, reason)
        self.duplicates_ignored.labels(self.service)
