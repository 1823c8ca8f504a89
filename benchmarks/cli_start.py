"""How fast `fleetpilot` answers when it does no work (`--version`, `--help`, a command's `--help`), as a ratio to
`python -c pass` measured in the same run, plus the slowest imports of each (`python -X importtime`).

The aim is 0.5 s a command on an idle machine; the ratio is what to compare across runs (machines are shared).
Run: `python -m benchmarks.cli_start`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from benchmarks.common import write_result

REPEATS = 7
AIM_S = 0.5
COMMANDS = (["--version"], ["--help"], ["config", "--help"], ["status", "--help"], ["dlq", "--help"], ["up", "--help"])
SLOWEST_IMPORTS_SHOWN = 3
CLI = [sys.executable, "-m", "services.cli.main"]


def wall_s(command: list[str]) -> float:
    """The median wall time of `command` over REPEATS runs (the first, warming the disk cache, not counted)."""
    subprocess.run(command, capture_output=True, check=False)
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def slowest_imports(args: list[str]) -> list[tuple[str, float]]:
    """The top-level imports that cost most (cumulative), from `-X importtime`'s report on stderr."""
    done = subprocess.run([sys.executable, "-X", "importtime", *CLI[1:], *args], capture_output=True, text=True)
    costs = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, indented = line.removeprefix("import time:").split("|")
        if not indented.removeprefix(" ").startswith(" "):  # a top-level import (nested ones are indented)
            costs.append((indented.strip(), int(cumulative) / 1e6))
    return sorted(costs, key=lambda cost: -cost[1])[:SLOWEST_IMPORTS_SHOWN]


def main() -> None:
    reference_s = wall_s([sys.executable, "-c", "pass"])
    print(f"python -c pass: {reference_s:.3f} s (the reference)")
    print(f"{'command':<24} {'wall s':>7} {'÷ ref':>6}  {'aim':>4}  slowest imports")
    rows = []
    for args in COMMANDS:
        seconds = wall_s([*CLI, *args])
        imports = slowest_imports(args)
        shown = ", ".join(f"{name} {cost:.2f}s" for name, cost in imports)
        verdict = "ok" if seconds <= AIM_S else "slow"
        print(f"{' '.join(args):<24} {seconds:>7.3f} {seconds / reference_s:>6.1f}  {verdict:>4}  {shown}")
        rows.append({"command": args, "wall_s": seconds, "ratio_to_python": seconds / reference_s, "imports": imports})
    path = write_result("cli_start", {"reference_s": reference_s, "aim_s": AIM_S, "commands": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
