"""The files k8s/components/monitoring carries as copies (kustomize reads only files under its directory):
the Grafana dashboards, and the alert rules wrapped in a PrometheusRule. `python -m tests.deploy.k8s_copies`
rewrites them from deploy/; tests/deploy/test_k8s.py fails while they differ."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "k8s" / "components" / "monitoring"
DASHBOARDS = REPO / "deploy" / "grafana" / "dashboards"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
RULE = MONITORING / "prometheus-rule.yaml"

RULE_HEADER = """\
# deploy/prometheus/alerts.yml as a PrometheusRule: written by `python -m tests.deploy.k8s_copies`, not by hand.
"""


class _BlockStrings(yaml.SafeDumper):
    """Multi-line PromQL kept as a block, as alerts.yml writes it."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockStrings.add_representer(str, _represent_str)


def release_label() -> str:
    """The Helm release label the operator set on the PodMonitor: the rule carries the same one."""
    monitor = yaml.safe_load((MONITORING / "pod-monitor.yaml").read_text())
    release: str = monitor["metadata"]["labels"]["release"]
    return release


def prometheus_rule() -> str:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "fleetpilot-alerts",
            "labels": {"app.kubernetes.io/name": "fleetpilot-alerts", "release": release_label()},
        },
        "spec": {"groups": groups},
    }
    return RULE_HEADER + yaml.dump(rule, Dumper=_BlockStrings, sort_keys=False, width=120)


def expected_copies() -> dict[Path, str]:
    copies = {MONITORING / "dashboards" / path.name: path.read_text() for path in sorted(DASHBOARDS.glob("*.json"))}
    copies[RULE] = prometheus_rule()
    return copies


def stale_copies() -> list[Path]:
    return [path for path, text in expected_copies().items() if not path.exists() or path.read_text() != text]


def main() -> None:
    for path in stale_copies():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected_copies()[path])
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
