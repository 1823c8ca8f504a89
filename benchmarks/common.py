"""What benchmarks share: where results go and how they are written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path("bench-results")


def write_result(name: str, result: Any) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path
