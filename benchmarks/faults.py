"""`python -m benchmarks.faults`: run the fault-injection suite (tests/faults) and print its table.

The suite itself writes bench-results/faults.json (one row per fault: published, processed, duplicates applied,
lost, double launches, budget breaches, recovery seconds), the three-node JetStream cluster's rows
(tests/faults/test_cluster.py: the stream leader's node killed, then a second node) among them; `--soak` runs the
long variant instead.
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.common import RESULTS_DIR
from tests.faults.conftest import format_table


def main(argv: list[str]) -> int:
    marker = "soak" if "--soak" in argv else "not soak"
    path = RESULTS_DIR / ("faults-soak.json" if marker == "soak" else "faults.json")
    path.unlink(missing_ok=True)
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", marker, "tests/faults"])
    if path.exists():
        print(format_table(json.loads(path.read_text())))
        print(f"written to {path}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
