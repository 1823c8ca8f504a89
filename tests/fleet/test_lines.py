"""Snapshot lines are rebuilt only where what they show changed, and then show the change."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from services.fleet.core import FleetCore
from services.fleet.lines import SnapshotLines, format_line
from shared.contract import InstanceState as S
from tests.fleet.test_core import ID, T0, observed, producing, task


def test_an_unchanged_instance_keeps_its_line_and_a_change_rebuilds_it() -> None:
    core = FleetCore()
    start = producing(core, T0)
    core.observe_instance(observed(S.LOADING, start, 2, price_usd_per_h=0.4), start)
    first = {line.instance_id: line for line in core.snapshot(start + timedelta(seconds=10)).instances}
    again = {line.instance_id: line for line in core.snapshot(start + timedelta(seconds=20)).instances}
    assert all(again[i] is first[i] for i in (ID, 2))  # nothing they show moved
    # a completion changes the producer's line (last task, count, throughput), not the loading one's
    done = start + timedelta(seconds=30)
    core.observe_task(task("completed", done, task_id="c1"), done)
    after = {line.instance_id: line for line in core.snapshot(done).instances}
    assert after[ID] is not first[ID] and after[ID].tasks_completed == 2 and after[ID].last_task_at == done
    assert after[2] is first[2]
    # six minutes on, the uptime they show (to 0.1 h) has moved: both lines are rebuilt
    later = {line.instance_id: line for line in core.snapshot(done + timedelta(minutes=6)).instances}
    assert all(later[i] is not after[i] for i in (ID, 2))
    assert later[2].line.endswith("0.1h up") and after[2].line.endswith("0.0h up")
    # a state change shows at once
    core.observe_instance(observed(S.RUNNING, done, 2, price_usd_per_h=0.4), done)
    shown = {line.instance_id: line for line in core.snapshot(done + timedelta(minutes=6)).instances}
    assert shown[2].state is S.RUNNING


def test_a_gone_instance_leaves_the_lines() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.LOADING, T0, 2), T0)
    assert [line.instance_id for line in core.snapshot(T0).instances] == [2]
    core.observe_instance(observed(S.GONE, T0, 2), T0)
    assert core.snapshot(T0).instances == []


def test_only_the_last_snapshots_lines_are_kept() -> None:
    """An instance left out of a snapshot (gone, forgotten) leaves the kept lines: memory follows the fleet, not
    every instance ever shown. Shown again, its line is built anew; a line shown throughout is kept."""
    core = FleetCore()
    core.observe_instance(observed(S.LOADING, T0, 2), T0)
    core.observe_instance(observed(S.LOADING, T0, 3), T0)
    records = [core.instances[2], core.instances[3]]
    lines = SnapshotLines()
    now_s, window_s = T0.timestamp(), core.config.throughput_window_s
    (first_2, first_3), _ = lines.lines(records, now_s, window_s)
    [kept_2], _ = lines.lines(records[:1], now_s, window_s)
    (again_2, again_3), _ = lines.lines(records, now_s, window_s)
    assert kept_2 is first_2 and again_2 is first_2
    assert again_3 is not first_3 and again_3 == first_3


def test_a_line_moved_only_by_tasks_is_the_line_a_fresh_build_gives() -> None:
    """A producer's line after completions is copied from its validated line with what tasks move; it must equal,
    field for field, the line validated from scratch, and a settled change must validate the whole line again."""
    core = FleetCore()
    start = producing(core, T0)
    core.snapshot(start + timedelta(seconds=10))
    for n in range(1, 4):
        done = start + timedelta(seconds=30 * n)
        core.observe_task(task("completed", done, task_id=f"c{n}"), done)
    moved = {line.instance_id: line for line in core.snapshot(done).instances}[ID]
    record = core.instances[ID]
    [fresh], _ = SnapshotLines().lines([record], done.timestamp(), core.config.throughput_window_s)
    assert moved == fresh and moved.model_dump() == fresh.model_dump()
    assert moved.model_fields_set == fresh.model_fields_set
    assert moved.tasks_completed == 4 and moved.last_task_at == done
    # a settled field that changes (here to a value the contract refuses) makes the line validated anew
    record.price_usd_per_h = -1.0  # what a bug upstream would leave in the record: validation must refuse it
    with pytest.raises(ValidationError):
        core.snapshot(done)


def test_reused_text_and_kept_spend_are_what_a_fresh_build_shows() -> None:
    """A line whose text is rebuilt from its kept settled part reads as format_line writes it, and the snapshot's
    spend, added from the figures kept with the lines, is their committed dollars (a parked one at its disk)."""
    core = FleetCore()
    start = producing(core, T0)
    core.observe_instance(observed(S.LOADING, start, 2, price_usd_per_h=0.4), start)
    parked_at = start + timedelta(minutes=1)
    core.observe_instance(
        observed(S.PARKED, parked_at, 3, park_reason="stopped", storage_usd_per_h=0.02, vast_actual_status="stopped"),
        parked_at,
    )
    core.snapshot(parked_at)
    for n in range(1, 4):
        done = start + timedelta(minutes=7 * n)
        core.observe_task(task("completed", done, task_id=f"c{n}"), done)
        snapshot = core.snapshot(done)
        for line in snapshot.instances:
            record = core.instances[line.instance_id]
            assert line.line == format_line(record, done.timestamp(), line.throughput_tasks_per_h)
        assert snapshot.spend_usd_per_h == pytest.approx(sum(line.committed_usd_per_h for line in snapshot.instances))
        assert snapshot.spend_usd_per_h == pytest.approx(0.5 + 0.4 + 0.02)
