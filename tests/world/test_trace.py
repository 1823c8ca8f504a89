"""Trace files: the documented CSV format, clear errors with line numbers, bundled traces match their generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.world import make_traces
from sim.world.trace import Trace, TraceError, format_trace, load_trace, parse_trace


def test_a_well_formed_trace_parses_to_arrivals_per_minute() -> None:
    trace = parse_trace("minute,arrivals\n0,3\n1,0\n2,12\n", "t.csv")
    assert trace.arrivals_per_min == (3, 0, 12)
    assert trace.total_tasks == 15
    assert parse_trace(format_trace(trace), "again").arrivals_per_min == trace.arrivals_per_min


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("minutes,arrivals\n0,1\n", 1, "header"),
        ("", 1, "header"),
        ("minute,arrivals\n0,1\n1,two\n", 3, "integers"),
        ("minute,arrivals\n0,1\n1,2,3\n", 3, "two fields"),
        ("minute,arrivals\n0,1\n2,2\n", 3, "expected minute 1"),
        ("minute,arrivals\n0,1\n1,-4\n", 3, ">= 0"),
        ("minute,arrivals\n", 2, "no rows"),
    ],
)
def test_a_malformed_trace_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(TraceError) as caught:
        parse_trace(text, "bad.csv")
    assert f"bad.csv:{line}:" in str(caught.value)
    assert words in str(caught.value)


def test_load_trace_reports_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.csv"
    path.write_text("minute,arrivals\n0,5\n1,5\n2,oops\n")
    with pytest.raises(TraceError, match=r"broken\.csv:4: minute and arrivals must be integers"):
        load_trace(path)


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "absent.csv")


def test_the_bundled_traces_are_what_their_generator_makes() -> None:
    assert make_traces.main(["--check"]) == 0
    names = {path.stem for path in make_traces.bundled_trace_paths()}
    assert names == {"steady", "diurnal", "spike", "ramp", "bursty", "decline", "week"}


def test_the_week_trace_peaks_at_a_thousand_reference_machines() -> None:
    week = load_trace(make_traces.TRACES_DIR / "week.csv")
    assert week.minutes == 7 * 24 * 60
    assert 950 <= week.peak_tasks_per_h / make_traces.REFERENCE_TASKS_PER_H <= 1050


def test_negative_arrivals_are_refused_in_code_too() -> None:
    with pytest.raises(TraceError, match="minute 1"):
        Trace.of([1, -1])
