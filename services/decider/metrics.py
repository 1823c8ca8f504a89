"""decider's Prometheus metrics, declared in one place."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.decider.guardrails import GuardrailRule
from services.decider.triggering import RUN_LABELS


class DeciderMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            "fleetpilot_decider_runs_total", "Decider runs, by what triggered them and how they ended",
            ["trigger", "outcome"], registry=registry,
        )  # fmt: skip
        self.run_duration = Histogram(
            "fleetpilot_decider_run_duration_seconds", "Wall time of one decider run (lock held)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=registry,
        )  # fmt: skip
        self.guardrail_refusals = Counter(
            "fleetpilot_guardrail_refusals_total", "Actions refused (or trimmed) by a guardrail, by rule",
            ["rule"], registry=registry,
        )  # fmt: skip
        self.suppressed_runs = Counter(
            "fleetpilot_decider_suppressed_runs_total", "Runs the rate limit refused, by their would-be trigger",
            ["trigger"], registry=registry,
        )  # fmt: skip
        self.skipped_runs = Counter(
            "fleetpilot_decider_covered_runs_total",
            "Runs not needed because another replica's run already saw every trigger", registry=registry,
        )  # fmt: skip
        self.fast_path = Counter(
            "fleetpilot_decider_fast_path_total", "Runs ended on the fast path (policy holds, nothing P0): no advisor",
            registry=registry,
        )  # fmt: skip
        self.triggers = Counter(
            "fleetpilot_decider_triggers_total", "Triggers received, by priority and reason",
            ["priority", "reason"], registry=registry,
        )  # fmt: skip
        self.lock_held = Gauge(
            "fleetpilot_decider_lock_held", "1 while this replica holds the single-flight lock", registry=registry
        )
        self.lock_available = Gauge(
            "fleetpilot_decider_lock_backend_up", "0 while Redis (the lock) cannot be reached", registry=registry
        )
        self.lock_attempts = Counter(
            "fleetpilot_decider_lock_attempts_total", "Lock attempts: acquired, busy, unavailable, lost",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.alerts = Counter(
            "fleetpilot_decider_alerts_total", "Alert-level conditions (stale inputs, Redis down, lock lost)",
            ["kind"], registry=registry,
        )  # fmt: skip
        self.commands = Counter(
            "fleetpilot_decider_commands_total", "Commands published, by verb", ["verb"], registry=registry
        )
        self.directive_requests = Counter(
            "fleetpilot_decider_directive_requests_total",
            "Requests of `fleetpilot directives`, by operation and how each ended (ok, refused, error, invalid)",
            ["operation", "outcome"], registry=registry,
        )  # fmt: skip
        self.directives_in_force = Gauge(
            "fleetpilot_decider_directives_in_force", "Operator directives the last run enforced", registry=registry
        )
        self.lock_available.set(1)
        for label in RUN_LABELS:
            self.suppressed_runs.labels(label)
        for rule in GuardrailRule:
            self.guardrail_refusals.labels(rule.value)
        for outcome in ("acquired", "busy", "unavailable", "lost"):
            self.lock_attempts.labels(outcome)
        # present from the start, so an alert rule's increase() sees the first failed command publish
        self.alerts.labels("command_publish_failed")
