"""The demo's dashboard picture: the services' /metrics sampled while the demo runs, drawn as the Grafana
dashboards' main panels (matplotlib; Grafana itself does not run on the build machines).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

# (service, metric, label filter) → series name; each mirrors a query on deploy/grafana's dashboards
SAMPLED: tuple[tuple[str, str, dict[str, str], str], ...] = (
    ("demand", "fleetpilot_demand_arrival_rate_per_hour", {"window": "1h"}, "arrivals/h (1 h)"),
    ("demand", "fleetpilot_demand_capacity_tasks_per_hour", {}, "capacity/h"),
    ("demand", "fleetpilot_demand_pending_tasks", {}, "pending tasks"),
    ("demand", "fleetpilot_demand_backlog_worker_hours", {}, "backlog worker-hours"),
    ("fleet", "fleetpilot_spend_usd_per_hour", {}, "spend $/h"),
    ("provisioner", "fleetpilot_budget_usd_per_hour", {}, "budget $/h"),
)


@dataclass
class MetricSamples:
    times: list[datetime] = field(default_factory=list)
    series: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    fleet_by_state: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    async def sample(self, client: httpx.AsyncClient, ports: dict[str, int], at: datetime) -> None:
        texts: dict[str, str] = {}
        for service in {s for s, *_ in SAMPLED} | {"fleet"}:
            try:
                texts[service] = (await client.get(f"http://127.0.0.1:{ports[service]}/metrics")).text
            except httpx.HTTPError:
                return  # skip this instant rather than draw a false zero
        values: dict[str, float] = {}
        by_state: dict[str, float] = defaultdict(float)
        for service, text in texts.items():
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if service == "fleet" and sample.name == "fleetpilot_fleet_instances":
                        by_state[sample.labels.get("state", "?")] += sample.value
                    for sampled_service, metric, labels, name in SAMPLED:
                        matches = sampled_service == service and sample.name == metric
                        if matches and all(sample.labels.get(k) == v for k, v in labels.items()):
                            values[name] = sample.value
        self.times.append(at)
        for *_, name in SAMPLED:
            self.series[name].append(values.get(name, float("nan")))
        for state in set(by_state) | set(self.fleet_by_state):
            self.fleet_by_state[state].append(by_state.get(state, 0.0))
            while len(self.fleet_by_state[state]) < len(self.times):
                self.fleet_by_state[state].insert(0, 0.0)

    def draw(self, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, 2, figsize=(14, 8), sharex=True)
        fig.suptitle("FleetPilot demo — sampled from the services' /metrics")
        demand, queue, fleet, cost = axes.flat
        demand.set_title("Demand and capacity (tasks/h)")
        for name in ("arrivals/h (1 h)", "capacity/h"):
            demand.plot(self.times, self.series[name], label=name)
        queue.set_title("Queue")
        queue.plot(self.times, self.series["pending tasks"], label="pending tasks")
        backlog = queue.twinx()
        backlog.plot(self.times, self.series["backlog worker-hours"], color="tab:red", label="backlog worker-hours")
        backlog.set_ylabel("worker-hours")
        fleet.set_title("Fleet by state")
        states = [s for s in self.fleet_by_state if any(self.fleet_by_state[s])]
        if states:
            fleet.stackplot(self.times, [self.fleet_by_state[s] for s in states], labels=states)
        cost.set_title("Spend vs budget ($/h)")
        cost.plot(self.times, self.series["spend $/h"], label="spend")
        cost.plot(self.times, self.series["budget $/h"], label="budget", linestyle="--")
        for axis in axes.flat:
            axis.legend(loc="upper left", fontsize=8)
            axis.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
            axis.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
