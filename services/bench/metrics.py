"""bench's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class BenchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.results = Counter(
            "fleetpilot_bench_results_total",
            "Bench results published, by kind and verdict",
            ["kind", "verdict"],
            registry=registry,
        )
        self.reports = Counter(
            "fleetpilot_bench_reports_total",
            "GPU suite reports received over HTTP, by outcome",
            ["outcome"],
            registry=registry,
        )
        self.reports_missing = Counter(
            "fleetpilot_bench_reports_missing_total",
            "Deadlines a GPU bench request passed without its instance's suite report (verdict unknown; alert on it)",
            registry=registry,
        )
        self.pending_requests = Gauge(
            "fleetpilot_bench_pending_requests",
            "GPU bench requests waiting for their instance's report",
            registry=registry,
        )
        self.run_duration = Histogram(
            "fleetpilot_bench_run_duration_seconds",
            "Wall time of benchmarks this service ran itself (local GPU suite, serving sweeps)",
            ["kind"],
            buckets=(1, 5, 15, 60, 300, 900, 1800, 3600),
            registry=registry,
        )
        for outcome in (
            "accepted",
            "unauthorized",
            "invalid",
            "disabled",
            "too_large",
            "rate_limited",
            "duplicate",
            "mismatch",
        ):
            self.reports.labels(outcome)
