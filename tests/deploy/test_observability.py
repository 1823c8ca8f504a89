"""Dashboards, scrape config and alert rules: they load without edits and query only metrics that exist."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.cli.demo_dashboard import PanelAnswer, PanelQuery, Series, grafana_expr, panel_queries
from tests.deploy.metric_names import ALERT_METRICS, DASHBOARD_METRICS, HISTOGRAMS, REQUIRED_METRICS
from tests.deploy.promql import metric_names, without_grafana_variables
from tests.deploy.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "deploy" / "grafana"
PROMETHEUS = REPO / "deploy" / "prometheus"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
PROMETHEUS_BUILTINS = frozenset({"up", "scrape_duration_seconds"})
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


@pytest.fixture
def promtool() -> str:
    return require_tool("promtool")


def load_dashboard(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # panels inside a collapsed row
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, expr) for every query of every panel of every dashboard (what the live test evaluates too), and
    of every Prometheus annotation (launches, drains marked on the graphs)."""
    return [(query.where, query.expr) for query in panel_queries()] + annotation_queries()


def annotation_queries() -> list[tuple[str, str]]:
    return [
        (f"{path.name} annotation {annotation['name']}", annotation["expr"])
        for path in DASHBOARDS
        for annotation in load_dashboard(path)["annotations"]["list"]
        if annotation.get("datasource", {}).get("type") == "prometheus"
    ]


def test_launches_and_drains_are_marked_on_the_fleet_and_demand_dashboards() -> None:
    for name in ("fleet-overview.json", "demand-capacity.json"):
        exprs = [expr for where, expr in annotation_queries() if where.startswith(name)]
        assert any("fleetpilot_provisioner_instances_launched_total" in expr for expr in exprs), name
        assert any('to_state="draining"' in expr for expr in exprs), name


def alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def unknown_metrics(expr: str, known: list[str] = DASHBOARD_METRICS) -> set[str]:
    unknown = set()
    for name in metric_names(expr):
        histogram_part = any(name.endswith(s) and name.removesuffix(s) in HISTOGRAMS for s in HISTOGRAM_SERIES)
        if name not in known and name not in PROMETHEUS_BUILTINS and not histogram_part:
            unknown.add(name)
    return unknown


# --- the metric-name extraction itself, on the shapes the queries use ---


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('sum by (state) (fleetpilot_fleet_instances{state="producing"})', {"fleetpilot_fleet_instances"}),
        (
            "histogram_quantile(0.95, sum by (le, app_name) (rate(x_seconds_bucket[$__rate_interval])))",
            {"x_seconds_bucket"},
        ),
        ("max(a_usd) > max(b_usd)", {"a_usd", "b_usd"}),
        ("sum(increase(c_total[15m])) == 0 or absent(c_total)", {"c_total"}),
        ('min_over_time(sum(g{state=~"requested|loading"})[3h:5m]) > 0 and on() count(g offset 3h) > 0', {"g"}),
        ('a / on(job) group_left(gpu_model) b{kind="completed", x="sum(y)"} * 3600 + 1e3', {"a", "b"}),
        ('sum_over_time(max(spend)[$__range:1m]) / 60 unless {__name__="other"}', {"spend", "other"}),
        ("sum(rate(m_total[5m])) by (service) > bool 0", {"m_total"}),
    ],
)
def test_metric_names_are_found_and_nothing_else(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


# --- dashboards ---


def test_the_four_dashboards_exist_with_distinct_uids_and_titles() -> None:
    boards = [load_dashboard(path) for path in DASHBOARDS]
    titles = {board["title"] for board in boards}
    assert titles == {
        "FleetPilot / Fleet overview",
        "FleetPilot / Demand and capacity",
        "FleetPilot / Decisions, agent and guardrails",
        "FleetPilot / Cost",
    }
    uids = [board["uid"] for board in boards]
    assert len(set(uids)) == len(uids) and all(0 < len(uid) <= 40 for uid in uids)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_loads_without_edits(path: Path) -> None:
    """What Grafana needs from a provisioned file: no export placeholders, the provisioned datasource, a layout."""
    text = path.read_text()
    assert "${DS_" not in text and "__inputs" not in text, "an exported-for-sharing dashboard needs edits to load"
    board = json.loads(text)
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board.get("id") is None, "a provisioned dashboard must not carry a database id"
    datasource_uids = {ds["uid"] for ds in provisioned_datasources()}
    ids = [panel["id"] for panel in panels(board)]
    assert len(set(ids)) == len(ids), "panel ids must be unique"
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] in datasource_uids, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in datasource_uids
            assert target["expr"].strip()


@pytest.mark.parametrize(("where", "expr"), dashboard_queries(), ids=lambda v: v if len(v) < 80 else None)
def test_dashboard_queries_use_only_listed_metrics(where: str, expr: str) -> None:
    assert metric_names(expr), f"{where}: no metric found in {expr!r}"
    assert unknown_metrics(expr) == set(), where


def test_every_required_metric_is_on_a_dashboard() -> None:
    used = set().union(*(metric_names(expr) for _, expr in dashboard_queries()))
    used |= {name.removesuffix(s) for name in used for s in HISTOGRAM_SERIES if name.endswith(s)}
    assert set(REQUIRED_METRICS) - used == set()


def provisioned_datasources() -> list[dict[str, Any]]:
    config = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    return list(config["datasources"])


def test_provisioning_points_at_the_dashboards_and_prometheus() -> None:
    [datasource] = provisioned_datasources()
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "fleetpilot.yaml").read_text())
    [provider] = providers["providers"]
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in compose["services"]["grafana"]["volumes"]}
    assert mounts[provider["options"]["path"]] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"


# --- Prometheus: scrape config and alert rules ---

ALERTS_OF_THE_ISSUE = (
    "FleetPilotSpendNearBudget",
    "FleetPilotSpendAboveBudget",
    "FleetPilotSpendWithoutBudget",
    "FleetPilotCoreServiceDown",
    "FleetPilotWorkersStalled",
    "FleetPilotVastAuthFailing",
    "FleetPilotScrapeTargetDown",
    "FleetPilotAgentDegraded",
    "FleetPilotDeciderRedisUnreachable",
    "FleetPilotConsumerLagGrowing",
    "FleetPilotForeignInstances",
    "FleetPilotDeadLettersRising",
    "FleetPilotMachinesStuck",
    "FleetPilotDeciderNotRunning",
    "FleetPilotBenchReportsMissing",
    "FleetPilotUnderProvisionedSustained",
    "FleetPilotLaunchesRefusedByBudget",
    "FleetPilotNoAcceptableOffers",
    "FleetPilotVastActionsFailing",
)


def test_alert_rules_cover_the_issue_and_use_only_listed_metrics() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert set(ALERTS_OF_THE_ISSUE) <= set(rules)
    for name, rule in rules.items():
        assert metric_names(rule["expr"]), name
        assert unknown_metrics(rule["expr"], DASHBOARD_METRICS + ALERT_METRICS) == set(), name
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def runbook_anchors() -> set[str]:
    """GitHub's anchor for each section heading of docs/runbook.md: lower case, punctuation dropped, spaces as -."""
    headings = [line[3:] for line in (REPO / "docs" / "runbook.md").read_text().splitlines() if line.startswith("## ")]
    return {re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    anchors = runbook_anchors()
    for rule in alert_rules():
        path, _, anchor = rule["annotations"].get("runbook_url", "").partition("#")
        assert path == "docs/runbook.md" and anchor in anchors, f"{rule['alert']}: no runbook section {anchor!r}"
        assert rule["alert"] in runbook_section(anchor), f"{rule['alert']} is not named in its runbook section"


def runbook_section(anchor: str) -> str:
    """The text of one runbook section, from its heading to the next."""
    sections = (REPO / "docs" / "runbook.md").read_text().split("\n## ")[1:]
    by_anchor = {re.sub(r"[^a-z0-9 -]", "", s.split("\n")[0].lower()).replace(" ", "-"): s for s in sections}
    return by_anchor[anchor]


def test_every_service_is_scraped() -> None:
    from services.cli.service_apps import SERVICES

    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    scraped = {name for job in config["scrape_configs"] for sd in job["dns_sd_configs"] for name in sd["names"]}
    assert set(SERVICES) <= scraped


def test_promtool_accepts_the_config_and_rules(promtool: str) -> None:
    for command in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"]):
        result = subprocess.run([promtool, *command], cwd=PROMETHEUS, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_story_that_fires_it_and_one_that_does_not() -> None:
    """Checked here, so that `promtool test rules` passing means each alert was shown firing and quiet."""
    stories = yaml.safe_load((Path(__file__).parent / "alerts_test.yml").read_text())["tests"]
    checks = [check for story in stories for check in story["alert_rule_test"]]
    for name in (rule["alert"] for rule in alert_rules()):
        assert any(c["alertname"] == name and c.get("exp_alerts") for c in checks), f"nothing shows {name} firing"
        assert any(c["alertname"] == name and not c.get("exp_alerts") for c in checks), f"nothing shows {name} quiet"


def test_alerts_fire_on_their_stories_and_stay_quiet_otherwise(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_query_is_valid_promql(tmp_path: Path, promtool: str) -> None:
    """promtool parses recording rules: each dashboard query becomes one, Grafana's variables as durations."""
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [
                    {"record": f"fleetpilot:dashboard_query_{n}", "expr": without_grafana_variables(expr)}
                    for n, (_, expr) in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the live evaluation's helpers (services/cli/demo_dashboard.py; the run itself is in tests/e2e) ---


@pytest.mark.parametrize(
    ("step_s", "scrape_s", "expected"),
    [(15.0, 15.0, "rate(x[60s]) + increase(y[3600s])"), (60.0, 15.0, "rate(x[75s]) + increase(y[3600s])")],
)
def test_grafana_range_variables_are_replaced_as_grafana_computes_them(
    step_s: float, scrape_s: float, expected: str
) -> None:
    """$__rate_interval is max($__interval + scrape interval, 4 x scrape interval) in Grafana."""
    expr = "rate(x[$__rate_interval]) + increase(y[$__range])"
    assert grafana_expr(expr, 3600.0, step_s, scrape_s) == expected


def test_the_picture_names_each_drawn_panels_unit_as_grafana_would() -> None:
    from services.cli.demo_dashboard import PICTURE_PANELS, UNIT_WORDS

    units = {(q.dashboard, q.panel): q.unit for q in panel_queries()}
    assert units[("fleet-overview.json", "Backlog")] == "h"  # worker-hours, not tasks
    assert units[("fleet-overview.json", "vast.ai API calls by endpoint and outcome")] == "reqps"
    assert all(units[key] in (*UNIT_WORDS, "short") for key in PICTURE_PANELS)


def test_an_answer_of_only_nan_is_no_data() -> None:
    query = PanelQuery("d.json", "p", "A", "histogram_quantile(0.95, x)")
    assert PanelAnswer(query, [Series({}, [1.0, 2.0], [float("nan"), float("nan")])]).points == 0
    assert PanelAnswer(query, [Series({}, [1.0, 2.0], [float("nan"), 0.0])]).points == 1
    assert PanelAnswer(query, error="bad_data").summary() == {"series": 0, "points": 0, "error": "bad_data"}


def test_the_picture_leaves_a_gap_where_nothing_was_scraped_and_reads_rates_at_the_speed_of_the_time() -> None:
    from datetime import UTC, datetime, timedelta

    from services.cli.demo_dashboard import local_speed, with_gaps

    times, values = with_gaps([0.0, 1.0, 2.0, 10.0, 11.0], [1.0, 1.0, 1.0, 5.0, 5.0], step_s=1.0)
    assert times == [0.0, 1.0, 2.0, 3.0, 10.0, 11.0]
    assert math.isnan(values[3]) and values[4] == 5.0  # no line drawn across 2 s .. 10 s
    assert with_gaps([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], step_s=1.0) == ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])

    epoch = datetime(2026, 3, 2, tzinfo=UTC)

    def slowed_at_100(wall_s: float) -> datetime:  # x360, then x36 from wall second 100
        sim_s = 360 * min(wall_s, 100.0) + 36 * max(0.0, wall_s - 100.0)
        return epoch + timedelta(seconds=sim_s)

    assert local_speed(slowed_at_100, 50.0) == 360.0
    assert local_speed(slowed_at_100, 150.0) == 36.0


def test_every_panel_the_demo_picture_draws_is_on_a_dashboard() -> None:
    """A panel renamed on a dashboard must not leave an empty square in the picture."""
    from services.cli.demo_dashboard import PICTURE_PANELS

    titles = {(query.dashboard, query.panel) for query in panel_queries()}
    assert [key for key in PICTURE_PANELS if key not in titles] == []
