"""The fault suite's table: each fault test adds a row; the session prints them and writes bench-results/faults.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import Row

ROWS: list[Row] = []
COLUMNS = ("fault", "published", "processed", "duplicates_applied", "lost", "double_launches", "budget_breaches",
           "recovery_s")  # fmt: skip


@pytest.fixture(scope="session")
def fault_rows() -> list[Row]:
    return ROWS


def format_table(rows: list[dict[str, Any]]) -> str:
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in COLUMNS) for r in rows]
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not ROWS:
        return
    rows = [row.as_dict() for row in ROWS]
    # `make soak` keeps its own table, so the fast suite's stays what `make test` measured
    name = "faults-soak.json" if config.option.markexpr == "soak" else "faults.json"
    path = Path(config.rootpath) / "bench-results" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(rows, indent=2) + "\n")
    terminalreporter.write_sep("=", "faults survived (recovery_s: wall seconds from the fault's end to healthy)")
    terminalreporter.write_line(format_table(rows))
    terminalreporter.write_line(f"written to {path.relative_to(config.rootpath)}")
