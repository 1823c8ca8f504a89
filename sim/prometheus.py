"""Prometheus and Alertmanager as local processes (Debian's `prometheus` and `prometheus-alertmanager`), for the
demo's dashboard picture and the monitoring tests: the project's own rule files and queries, the services
scraped on the ports they listen on.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import yaml

from sim.infra import LocalServer

# Debian installs Alertmanager as prometheus-alertmanager; upstream's tarball calls it alertmanager
ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")
INSTALL_HINT = "apt-get install prometheus prometheus-alertmanager"


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def alertmanager_binary() -> str | None:
    return next((path for name in ALERTMANAGER_BINARIES if (path := shutil.which(name))), None)


class PrometheusServer(LocalServer):
    """One scrape job per name, its targets in a file Prometheus watches (`set_targets` once ports are known)."""

    name = "prometheus"

    def __init__(
        self,
        jobs: Iterable[str],
        *,
        rule_files: Iterable[Path] = (),
        scrape_interval_s: float = 1.0,
        alertmanager_port: int | None = None,
        port: int | None = None,
        data_dir: Path | None = None,
    ) -> None:
        super().__init__(port, data_dir)
        self.jobs = list(jobs)
        self.targets_dir = self.data_dir / "targets"
        self.targets_dir.mkdir(exist_ok=True)
        interval = f"{int(scrape_interval_s * 1000)}ms"
        self.interval = interval
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(path.resolve()) for path in rule_files],
            "scrape_configs": [
                {"job_name": job, "file_sd_configs": [{"files": [str(self.targets_dir / f"{job}.json")]}]}
                for job in self.jobs
            ],
        }
        if alertmanager_port is not None:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
            }
        self.config_path = self.data_dir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError(f"prometheus is not installed ({INSTALL_HINT})")
        return [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            # the first send can precede Alertmanager's discovery; resent each evaluation, not after a minute
            f"--rules.alert.resend-delay={self.interval}",
            "--log.level=warn",
        ]

    def set_targets(self, ports: dict[str, int]) -> None:
        """Point each job at 127.0.0.1:<port>; written whole then renamed, so Prometheus never reads half a file."""
        for job in self.jobs:
            targets = [{"targets": [f"127.0.0.1:{ports[job]}"], "labels": {}}] if job in ports else []
            staged = self.targets_dir / f".{job}.json.tmp"
            staged.write_text(json.dumps(targets))
            staged.replace(self.targets_dir / f"{job}.json")

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready after {timeout_s:.0f} s; log:\n{self.log_path.read_text()[-2000:]}")

    def start(self) -> None:
        super().start()
        self.wait_ready()

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """The matrix Prometheus answers; an error (bad PromQL, a timeout) raises with Prometheus's reason."""
        params: dict[str, str | float] = {"query": expr, "start": start, "end": end, "step": step_s}
        answer = httpx.get(f"{self.url}/api/v1/query_range", params=params, timeout=30.0).json()
        if answer.get("status") != "success":
            raise ValueError(f"{expr!r}: {answer.get('errorType')}: {answer.get('error')}")
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/targets", params={"state": "active"}, timeout=10.0).json()
        targets: list[dict[str, Any]] = answer["data"]["activeTargets"]
        return targets


class AlertmanagerServer(LocalServer):
    """Alertmanager on a given configuration, clustering off (one process)."""

    name = "alertmanager"

    def __init__(self, config_text: str, port: int | None = None, data_dir: Path | None = None) -> None:
        super().__init__(port, data_dir)
        self.config_path = self.data_dir / "alertmanager.yml"
        self.config_path.write_text(config_text)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        binary = alertmanager_binary()
        if binary is None:
            raise RuntimeError(f"alertmanager is not installed ({INSTALL_HINT})")
        return [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.path={self.data_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]
