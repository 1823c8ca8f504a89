"""The provisioner's Prometheus metrics, on the service's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared.contract import RefusalRule
from shared.subjects import PROVISION_VERBS

VAST_ENDPOINTS = ("search", "create", "list_v1", "list_v0", "show", "manage", "destroy")
VAST_STATUSES = ("provisioning", "created", "loading", "running", "stopped", "exited", "offline", "unknown", "other")


class VastApiMetrics:
    """Every vast.ai API attempt, its outcome and latency; 429s counted on their own."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "fleetpilot_vast_api_calls_total",
            "vast.ai API requests by endpoint and outcome (each retry attempt counts)",
            ["endpoint", "outcome"],
            registry=registry,
        )
        self.rate_limited = Counter(
            "fleetpilot_vast_rate_limited_total",
            "vast.ai answers 429 (no Retry-After), by endpoint",
            ["endpoint"],
            registry=registry,
        )
        self.latency = Histogram(
            "fleetpilot_vast_api_latency_seconds",
            "Wall time of one vast.ai API request, by endpoint",
            ["endpoint"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=registry,
        )
        self.auth_ok = Gauge(
            "fleetpilot_vast_auth_ok",
            "1 when vast.ai accepted the API key at the last answer, 0 when it refused it (NaN: not asked yet)",
            registry=registry,
        )
        self.auth_ok.set(float("nan"))  # unknown until vast.ai answers: never a refusal nor an acceptance
        self.auth_refused_at: str | None = None  # the endpoint whose answer refused the key, while it does
        self.rows_skipped = Counter(
            "fleetpilot_vast_rows_skipped_total",
            "Offer, instance or charge rows vast.ai sent that could not be read: skipped, the rest of the answer used",
            ["endpoint"],
            registry=registry,
        )
        for endpoint in VAST_ENDPOINTS:
            self.rate_limited.labels(endpoint)
            self.calls.labels(endpoint, "ok")
        for endpoint in ("search", "list_v1", "list_v0", "invoices"):
            self.rows_skipped.labels(endpoint)

    def observe(self, endpoint: str, outcome: str, latency_s: float | None) -> None:
        self.calls.labels(endpoint, outcome).inc()
        if outcome == "auth_error":
            self.auth_ok.set(0)
            self.auth_refused_at = endpoint
        elif outcome == "ok":
            self.auth_ok.set(1)
            self.auth_refused_at = None
        if outcome == "rate_limited":
            self.rate_limited.labels(endpoint).inc()
        if latency_s is not None:
            self.latency.labels(endpoint).observe(latency_s)

    def auth_problem(self) -> str | None:
        """Why the provisioner is unhealthy on vast.ai's side, for /health; None while the key is accepted."""
        if self.auth_refused_at is None:
            return None
        return f"vast.ai refused the API key (FLEETPILOT_VAST_API_KEY) at its last answer ({self.auth_refused_at})"


class ProvisionerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.vast = VastApiMetrics(registry)
        self.spend = Gauge(
            "fleetpilot_spend_usd_per_hour",
            "Committed spend: the $/h of every instance the provisioner knows and vast has not yet destroyed",
            registry=registry,
        )
        # the limits themselves, so dashboards and the spend-above-budget alert compare against configuration
        self.budget = Gauge(
            "fleetpilot_budget_usd_per_hour", "The configured budget the provisioner enforces", registry=registry
        )
        self.max_instances = Gauge(
            "fleetpilot_max_instances", "The configured most instances alive at once", registry=registry
        )
        self.instances = Gauge(
            "fleetpilot_provisioner_instances",
            "Known instances by vast.ai actual_status",
            ["vast_status"],
            registry=registry,
        )
        self.foreign_instances = Gauge(
            "fleetpilot_vast_foreign_instances",
            "Instances on the vast.ai account without FleetPilot's label at the last good list: shown, never touched",
            registry=registry,
        )
        self.launches_refused = Counter(
            "fleetpilot_provisioner_launches_refused_total",
            "Launch commands refused whole, by rule (budget, max instances, unknown fleet, ...)",
            ["rule"],
            registry=registry,
        )
        self.commands = Counter(
            "fleetpilot_provisioner_commands_total",
            "Provision commands handled, by verb and outcome",
            ["verb", "outcome"],
            registry=registry,
        )
        self.commands_expired = Counter(
            "fleetpilot_provisioner_commands_expired_total",
            "Provision commands refused because they were taken after their expires_at, by verb",
            ["verb"],
            registry=registry,
        )
        self.reconciliations = Counter(
            "fleetpilot_provisioner_reconciliations_total",
            "Reconciliations with vast.ai's instance list, by outcome (a failed list is unknown, not empty)",
            ["outcome"],
            registry=registry,
        )
        self.instances_launched = Counter(
            "fleetpilot_provisioner_instances_launched_total",
            "Instances created on vast.ai, or adopted by label after an ambiguous create",
            ["how"],
            registry=registry,
        )
        self.second_rents_destroyed = Counter(
            "fleetpilot_provisioner_second_rents_destroyed_total",
            "Instances destroyed because their launch slot already had one (a create that acted unseen)",
            registry=registry,
        )
        self.refused_moves = Counter(
            "fleetpilot_provisioner_refused_moves_total",
            "State moves vast's list or our own command showed that the lifecycle table refuses (gone back to"
            " running, failed revived, backwards): the instance keeps its state",
            registry=registry,
        )
        # vast bills a rent's image pull once, at the host's own bandwidth price: it never shows in $/h
        self.bandwidth_usd = Counter(
            "fleetpilot_provisioner_bandwidth_usd_total",
            "Expected image-pull bandwidth cost of the machines rented (GB x the host's inet_down_cost), in USD",
            registry=registry,
        )
        for rule in RefusalRule:
            self.launches_refused.labels(rule.value)
        for verb in PROVISION_VERBS:
            self.commands_expired.labels(verb)
        for status in VAST_STATUSES:
            self.instances.labels(status)
        for outcome in ("ok", "failed"):
            self.reconciliations.labels(outcome)

    def set_instances_by_status(self, counts: dict[str, int]) -> None:
        for status in VAST_STATUSES:
            self.instances.labels(status).set(counts.get(status, 0))
