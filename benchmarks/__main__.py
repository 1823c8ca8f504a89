"""Run every benchmark module in turn (`make bench`); each prints its table and writes bench-results/<name>.json."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

HELPER_MODULES = {"common"}  # shared by the benchmarks, not one itself


def main(argv: list[str]) -> int:
    names = argv or sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if not m.name.startswith("_") and m.name not in HELPER_MODULES
    )
    failed = []
    for name in names:
        importlib.util.find_spec(f"benchmarks.{name}")  # a typo fails here, before minutes of other runs
        print(f"\n=== benchmarks.{name} ===", flush=True)
        if subprocess.call([sys.executable, "-m", f"benchmarks.{name}"]) != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
