"""Alerts reach someone: Prometheus's `alerting:` → Alertmanager (deploy/alertmanager) → the webhook receiver,
each wired in compose, and a firing rule shown arriving at the receiver through the real binaries."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from shared.processes import free_port, stop_process, wait_for_port
from sim.prometheus import AlertmanagerServer, PrometheusServer
from tests.deploy.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
ALERTMANAGER_CONFIG = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
# Alertmanager's group_wait (10 s) plus Prometheus's first evaluations; a bound on the wait, not a speed check
DELIVERY_WAIT_S = 90.0


def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    return services


def webhook_urls(config: dict[str, Any]) -> list[str]:
    return [hook["url"] for receiver in config["receivers"] for hook in receiver.get("webhook_configs", [])]


def test_amtool_accepts_the_alertmanager_config() -> None:
    amtool = require_tool("amtool")
    result = subprocess.run([amtool, "check-config", str(ALERTMANAGER_CONFIG)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_wires_prometheus_to_alertmanager_to_the_sink() -> None:
    services = compose_services()
    [alertmanagers] = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["alerting"]["alertmanagers"]
    [[target]] = [group["targets"] for group in alertmanagers["static_configs"]]
    host, port = target.split(":")
    assert host in services and f"127.0.0.1:{port}:{port}" in services[host]["ports"]
    assert "./deploy/alertmanager:/etc/alertmanager:ro" in services[host]["volumes"]
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in services[host]["command"]
    assert host in services["prometheus"]["depends_on"]

    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    [url] = webhook_urls(config)
    sink = httpx.URL(url)
    sink_service = services[sink.host]
    assert sink_service["entrypoint"] == ["python", "-m", "sim.alert_sink"]
    assert sink_service["command"][sink_service["command"].index("--port") + 1] == str(sink.port)
    assert sink.path == "/alerts"
    # every route, nested or not, ends at a receiver that exists
    receivers = {receiver["name"] for receiver in config["receivers"]}
    routes = [config["route"]]
    while routes:
        route = routes.pop()
        assert route.get("receiver", config["route"]["receiver"]) in receivers
        routes.extend(route.get("routes", []))


@pytest.fixture
def alert_sink() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "sim.alert_sink", "--port", str(port)], cwd=REPO)
    try:
        wait_for_port(port, 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


def test_the_sink_refuses_a_body_that_is_not_an_alertmanager_webhook(alert_sink: str) -> None:
    answer = httpx.post(f"{alert_sink}/alerts", json={"version": "4", "alerts": "firing"})
    assert answer.status_code == 400 and "not an Alertmanager webhook body" in answer.json()["error"]
    assert httpx.get(f"{alert_sink}/alerts").json() == []


def test_a_firing_rule_reaches_the_webhook_receiver(alert_sink: str, tmp_path: Path) -> None:
    """The project's Alertmanager config with its receiver's URL pointed here; a rule that fires at once."""
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{alert_sink}/alerts"
    rules = tmp_path / "always.yml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "wiring",
                        "rules": [
                            {
                                "alert": "FleetPilotWiringCheck",
                                "expr": "vector(1)",
                                "labels": {"severity": "critical", "job": "wiring"},
                                "annotations": {"summary": "the alert chain delivers"},
                            }
                        ],
                    }
                ]
            }
        )
    )
    with AlertmanagerServer(yaml.safe_dump(config), data_dir=tmp_path / "am") as alertmanager:
        prometheus = PrometheusServer(
            [], rule_files=[rules], alertmanager_port=alertmanager.port, data_dir=tmp_path / "prom"
        )
        with prometheus:
            deadline = time.monotonic() + DELIVERY_WAIT_S
            delivered: list[dict[str, Any]] = []
            while not delivered and time.monotonic() < deadline:
                time.sleep(1.0)
                delivered = httpx.get(f"{alert_sink}/alerts").json()
    assert delivered, f"nothing reached the receiver in {DELIVERY_WAIT_S:.0f} s"
    [notification] = delivered[:1]
    assert notification["receiver"] == "fleetpilot-webhook" and notification["status"] == "firing"
    [alert] = notification["alerts"]
    assert alert["labels"]["alertname"] == "FleetPilotWiringCheck"
    assert alert["annotations"]["summary"] == "the alert chain delivers"
