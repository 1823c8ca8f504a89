"""Task traces: CSV `minute,arrivals`, one row per minute, `arrivals` = tasks submitted during that minute."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HEADER = "minute,arrivals"


class TraceError(ValueError):
    """A malformed trace file; the message names the file, the line number and what was wrong."""


@dataclass(frozen=True)
class Trace:
    name: str
    arrivals_per_min: tuple[int, ...]

    @property
    def minutes(self) -> int:
        return len(self.arrivals_per_min)

    @property
    def total_tasks(self) -> int:
        return sum(self.arrivals_per_min)

    @property
    def peak_tasks_per_h(self) -> float:
        """The busiest hour (a sliding 60-minute sum), the figure a fleet is sized for."""
        counts = self.arrivals_per_min
        if len(counts) <= 60:
            return float(sum(counts)) * 60 / max(1, len(counts))
        window = best = sum(counts[:60])
        for i in range(60, len(counts)):
            window += counts[i] - counts[i - 60]
            best = max(best, window)
        return float(best)

    @classmethod
    def of(cls, arrivals_per_min: Sequence[int], name: str = "trace") -> Trace:
        for minute, count in enumerate(arrivals_per_min):
            if count < 0:
                raise TraceError(f"{name}: minute {minute} has negative arrivals {count}")
        return cls(name, tuple(int(c) for c in arrivals_per_min))


def parse_trace(text: str, name: str) -> Trace:
    """Parse CSV text; every error names `name:line` so a person can open the file at the bad row."""
    lines = text.splitlines()
    if not lines or lines[0].strip().replace(" ", "").lower() != HEADER:
        got = lines[0][:60] if lines else "an empty file"
        raise TraceError(f"{name}:1: expected the header {HEADER!r}, got {got!r}")
    arrivals: list[int] = []
    for number, raw in enumerate(lines[1:], start=2):
        line = raw.strip()
        if not line:
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 2:
            raise TraceError(f"{name}:{number}: expected two fields 'minute,arrivals', got {raw[:60]!r}")
        try:
            minute, count = int(fields[0]), int(fields[1])
        except ValueError:
            raise TraceError(f"{name}:{number}: minute and arrivals must be integers, got {raw[:60]!r}") from None
        if minute != len(arrivals):
            raise TraceError(f"{name}:{number}: expected minute {len(arrivals)} (one row per minute), got {minute}")
        if count < 0:
            raise TraceError(f"{name}:{number}: arrivals must be >= 0, got {count}")
        arrivals.append(count)
    if not arrivals:
        raise TraceError(f"{name}:2: the trace has a header but no rows")
    return Trace(name, tuple(arrivals))


def load_trace(path: str | Path) -> Trace:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's CSV export often starts with a BOM
    except UnicodeDecodeError as error:
        raise TraceError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise TraceError(f"{path}: cannot read the trace: {error.strerror or error}") from None
    trace = parse_trace(text, str(path))
    return Trace(path.stem, trace.arrivals_per_min)


def format_trace(trace: Trace) -> str:
    rows = [HEADER, *(f"{minute},{count}" for minute, count in enumerate(trace.arrivals_per_min))]
    return "\n".join(rows) + "\n"
