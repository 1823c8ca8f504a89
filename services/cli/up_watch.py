"""What `fleetpilot up` says while the stack runs: each launch, stop and destroy the provisioner carried out with
the spend it leaves, and a crashed service's last log lines before it is restarted. Pure: log text and metrics
text in, lines out; the reading of files and /metrics sits at the bottom."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx

from services.cli.terminal_text import printable

# the provisioner's line for a carried-out command (services/provisioner/outcome_log.py)
OUTCOME_MARKERS = (" launch done: ", " stop done: ", " destroy done: ", " resume done: ")
SPEND_METRIC = "fleetpilot_spend_usd_per_hour"
BUDGET_METRIC = "fleetpilot_budget_usd_per_hour"
LOG_TAIL_LINES = 20
# a service that keeps crashing is not helped by more restarts: the stack stops, with its log tail
MAX_RESTARTS = 3


def progress_lines(new_log_text: str) -> list[str]:
    """The provisioner's carried-out commands among new log lines, without the timestamp and logger name."""
    found = []
    for line in new_log_text.splitlines():
        for marker in OUTCOME_MARKERS:
            if marker in line:
                found.append(printable(marker.strip() + " " + line.split(marker, 1)[1], single_line=True))
                break
    return found


def metric_value(metrics_text: str, name: str) -> float | None:
    """A label-less sample from Prometheus text, or None when absent."""
    for line in metrics_text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def spend_line(metrics_text: str) -> str | None:
    spend, budget = metric_value(metrics_text, SPEND_METRIC), metric_value(metrics_text, BUDGET_METRIC)
    if spend is None or budget is None:
        return None
    return f"spend now ${spend:.2f}/h of ${budget:g}/h"


def tail(text: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    # a service logs what it rejected, a dead-lettered payload's bytes included
    return [printable(line, single_line=True) for line in text.splitlines()[-lines:]]


# --- adapters: the log files and /metrics ---


@dataclass
class LogFollower:
    """The text appended to a log file since the last read (a restart appends to the same file)."""

    path: Path
    offset: int = field(default=0)

    def skip_to_end(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def new_text(self) -> str:
        if not self.path.exists():
            return ""
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        self.offset += len(chunk)
        return chunk.decode(errors="replace")


def read_spend(metrics_url: str) -> str | None:
    """The provisioner's spend and budget from its /metrics; None while it does not answer."""
    try:
        return spend_line(httpx.get(metrics_url, timeout=2.0).text)
    except httpx.HTTPError:
        return None
