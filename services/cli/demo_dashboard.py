"""The demo's dashboard picture, from a real Prometheus: Debian's `prometheus` scrapes every service while the
demo runs, then every panel query of deploy/grafana/dashboards is evaluated against it. The picture draws the
dashboards' main panels from those answers (Grafana itself does not run on the build machines), with the
fleet's launches and drains marked; the summary says which panels had data.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sim.prometheus import PrometheusServer

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = REPO / "deploy" / "grafana" / "dashboards"
ALERT_RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
# Each service every second: the demo's day passes in minutes of wall time
SCRAPE_INTERVAL_S = 1.0
# points per panel in the picture, as a Grafana panel a few hundred pixels wide asks for
PICTURE_POINTS = 240
TARGETS_UP_WAIT_S = 60.0
# The cost panel sums spend per minute (a `[$__range:1m]` subquery): a window without a whole minute of wall
# time in it has nothing to sum, so the recording lasts at least this long
MIN_RECORDING_S = 65.0

# Transitions into these states are drawn as vertical markers on every panel
MARKERS = {"requested": ("launch", "tab:green"), "draining": ("drain", "tab:red")}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    legend: str = ""
    unit: str = ""  # the panel's Grafana unit (fieldConfig.defaults.unit)

    @property
    def where(self) -> str:
        return f"{self.dashboard}: {self.panel} [{self.ref_id}]"


def panel_queries(directory: Path = DASHBOARDS_DIR) -> list[PanelQuery]:
    """Every query of every panel (rows' nested panels included) of every dashboard file."""
    found = []
    for path in sorted(directory.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for inner in [panel, *panel.get("panels", [])]:
                for target in inner.get("targets", []):
                    legend = target.get("legendFormat", "")
                    unit = inner.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
                    found.append(PanelQuery(path.name, inner["title"], target["refId"], target["expr"], legend, unit))
    return found


def grafana_expr(expr: str, range_s: float, step_s: float, scrape_interval_s: float) -> str:
    """The query Grafana would send: its range variables replaced as Grafana computes them."""
    rate_interval_s = max(step_s + scrape_interval_s, 4 * scrape_interval_s)
    for variable, seconds in (
        ("$__rate_interval", rate_interval_s),
        ("$__interval", step_s),
        ("$__range", range_s),
    ):
        expr = expr.replace(variable, f"{max(1, round(seconds))}s")
    return expr


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


@dataclass
class PanelAnswer:
    query: PanelQuery
    series: list[Series] = field(default_factory=list)
    error: str | None = None

    @property
    def points(self) -> int:
        """Values that are numbers: NaN (a quantile of nothing, 0/0) is no data."""
        return sum(1 for s in self.series for value in s.values if not math.isnan(value))

    def summary(self) -> dict[str, Any]:
        return {"series": len(self.series), "points": self.points, "error": self.error}


def parse_matrix(result: list[dict[str, Any]]) -> list[Series]:
    return [
        Series(
            dict(item["metric"]),
            [float(at) for at, _ in item["values"]],
            [float(value) for _, value in item["values"]],
        )
        for item in result
    ]


def query_every_panel(
    prometheus: PrometheusServer, queries: Iterable[PanelQuery], start: float, end: float, step_s: float
) -> list[PanelAnswer]:
    answers = []
    for query in queries:
        expr = grafana_expr(query.expr, end - start, step_s, SCRAPE_INTERVAL_S)
        try:
            answers.append(PanelAnswer(query, parse_matrix(prometheus.query_range(expr, start, end, step_s))))
        except (ValueError, OSError) as error:
            answers.append(PanelAnswer(query, error=str(error)))
    return answers


def transition_markers(
    prometheus: PrometheusServer, start: float, end: float, step_s: float
) -> list[tuple[float, str, str]]:
    """(when, label, colour) wherever fleet's count of transitions into a marked state went up."""
    states = "|".join(MARKERS)
    expr = f'sum by (to_state) (fleetpilot_fleet_transitions_total{{to_state=~"{states}"}})'
    markers = []
    for series in parse_matrix(prometheus.query_range(expr, start, end, step_s)):
        label, colour = MARKERS[series.labels["to_state"]]
        values, times = series.values, series.times
        # a counter fleet creates at its first transition appears at 1 with no point before it
        if times and times[0] > start + step_s:
            values, times = [0.0, *values], [times[0] - step_s, *times]
        for before, after, at in zip(values, values[1:], times[1:], strict=False):
            if after > before:
                markers.append((at, label, colour))
    return markers


class DashboardRecorder:
    """Prometheus beside the demo: started with the stack, asked every panel's query when the replay ends."""

    def __init__(self, services: Iterable[str], workdir: Path) -> None:
        self.services = list(services)
        self.prometheus = PrometheusServer(
            self.services,
            rule_files=[ALERT_RULES],
            scrape_interval_s=SCRAPE_INTERVAL_S,
            data_dir=workdir / "prometheus",
        )
        self.started_at = 0.0

    def start(self, ports: dict[str, int]) -> None:
        self.prometheus.start()
        self.prometheus.set_targets({name: ports[name] for name in self.services})
        deadline = time.monotonic() + TARGETS_UP_WAIT_S
        while time.monotonic() < deadline:
            healthy = {t["labels"]["job"] for t in self.prometheus.active_targets() if t["health"] == "up"}
            if healthy >= set(self.services):
                break
            time.sleep(0.5)
        else:
            raise TimeoutError(f"Prometheus could not scrape every service within {TARGETS_UP_WAIT_S:.0f} s")
        self.started_at = time.time()

    def finish(
        self, picture: Path, to_simulated: Callable[[float], datetime], speed: float
    ) -> dict[str, dict[str, Any]]:
        """Every panel's answer over the whole run; the picture drawn from them; {panel: its summary}."""
        time.sleep(2 * SCRAPE_INTERVAL_S)  # the last scrape of the final state
        time.sleep(max(0.0, self.started_at + MIN_RECORDING_S - time.time()))
        end = time.time()
        step_s = max(SCRAPE_INTERVAL_S, (end - self.started_at) / PICTURE_POINTS)
        answers = query_every_panel(self.prometheus, panel_queries(), self.started_at, end, step_s)
        markers = transition_markers(self.prometheus, self.started_at, end, step_s)
        draw(answers, markers, picture, to_simulated, speed, step_s)
        return {answer.query.where: answer.summary() for answer in answers}

    def close(self) -> None:
        self.prometheus.close()


# (dashboard file, panel title) drawn, in this order, each in its own subplot
PICTURE_PANELS: tuple[tuple[str, str], ...] = (
    ("demand-capacity.json", "Completions vs arrivals per hour"),
    ("fleet-overview.json", "Backlog"),
    ("fleet-overview.json", "Instances by state"),
    ("cost.json", "Spend ($/h), the budget as a threshold"),
    ("decisions-agent-guardrails.json", "Runs by outcome"),
    ("fleet-overview.json", "vast.ai API calls by endpoint and outcome"),
)


# Grafana's units as the picture's y axes say them (Grafana prints them on its own axes; "short" is a plain number)
UNIT_WORDS = {"h": "hours", "reqps": "per simulated second", "currencyUSD": "$/h"}


def series_label(answer: PanelAnswer, series: Series) -> str:
    legend = answer.query.legend
    if legend:
        for name, value in series.labels.items():
            legend = legend.replace(f"{{{{{name}}}}}", value)
        return legend
    return ", ".join(series.labels.values()) or answer.query.ref_id


def with_gaps(times: list[float], values: list[float], step_s: float) -> tuple[list[float], list[float]]:
    """The points, with a NaN wherever Prometheus has no sample for more than two steps: a gap is drawn as a gap,
    not as a line across the time nobody measured."""
    out_times: list[float] = []
    out_values: list[float] = []
    for index, (at, value) in enumerate(zip(times, values, strict=True)):
        if index and at - times[index - 1] > 2 * step_s:
            out_times.append(times[index - 1] + step_s)  # a point without a value breaks the line there
            out_values.append(math.nan)
        out_times.append(at)
        out_values.append(value)
    return out_times, out_values


def local_speed(to_simulated: Callable[[float], datetime], wall_s: float, around_s: float = 1.0) -> float:
    """Simulated seconds per wall second around a wall moment, as the run's clock went."""
    before, after = to_simulated(wall_s - around_s), to_simulated(wall_s + around_s)
    return max(1e-9, (after - before).total_seconds() / (2 * around_s))


def draw(
    answers: list[PanelAnswer],
    markers: list[tuple[float, str, str]],
    path: Path,
    to_simulated: Callable[[float], datetime],
    speed: float,
    step_s: float = SCRAPE_INTERVAL_S,
) -> None:
    """Prometheus measures rates per wall-clock second; the picture divides them by the demo's speed, so a rate
    reads per simulated hour like the rest of the picture."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    by_panel: dict[tuple[str, str], list[PanelAnswer]] = {}
    for answer in answers:
        by_panel.setdefault((answer.query.dashboard, answer.query.panel), []).append(answer)
    fig, axes = plt.subplots(3, 2, figsize=(14, 11), sharex=True)
    fig.suptitle(
        "FleetPilot demo: the Grafana dashboards' queries, answered by Prometheus "
        f"(rates per simulated time: wall-clock rates ÷ the clock's speed then, x{speed:.0f} asked)"
    )
    for axis, key in zip(axes.flat, PICTURE_PANELS, strict=True):
        axis.set_title(key[1], fontsize=10)
        units = {UNIT_WORDS[a.query.unit] for a in by_panel.get(key, []) if a.query.unit in UNIT_WORDS}
        if len(units) == 1:
            axis.set_ylabel(units.pop(), fontsize=8)
        for answer in by_panel.get(key, []):
            per_wall_s = "rate(" in answer.query.expr
            for series in answer.series:
                times, values = with_gaps(series.times, series.values, step_s)
                if per_wall_s:  # the clock's speed may have changed during the run: divide by the speed then
                    values = [v / local_speed(to_simulated, at) for at, v in zip(times, values, strict=True)]
                axis.plot([to_simulated(at) for at in times], values, label=series_label(answer, series),
                          linewidth=1.2)  # fmt: skip
        seen: set[str] = set()
        for at, label, colour in markers:
            axis.axvline(
                to_simulated(at), color=colour, alpha=0.35, linewidth=0.8, label=None if label in seen else label
            )
            seen.add(label)
        axis.legend(loc="upper left", fontsize=7)
        axis.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
        axis.grid(alpha=0.3)
    for axis in axes[-1]:
        axis.set_xlabel("simulated time")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
