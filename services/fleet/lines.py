"""One line per instance, for people and the agent: `#33032712 RTX 4090 producing $0.50/h 2.3h up 118 tasks/h`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from services.fleet.lifecycle import EXPECTED_VAST_STATUS
from services.fleet.record import InstanceRecord
from shared.contract import InstanceLine, committed_usd_per_h


def format_line(record: InstanceRecord, now_s: float, throughput_tasks_per_h: float | None) -> str:
    """State (with its failure reason), vast's raw status only where it says something else, price, uptime
    since the rent (vast bills from creation) and the measured throughput once there is one."""
    return _text(_settled_text(record), record, now_s, throughput_tasks_per_h)


def _text(settled_text: str, record: InstanceRecord, now_s: float, throughput_tasks_per_h: float | None) -> str:
    """The whole line from its settled part (kept with a cached line) and what moves with the clock and tasks."""
    return f"{settled_text} {_moving_text(record, now_s, throughput_tasks_per_h)}"


def _settled_text(record: InstanceRecord) -> str:
    """What the line says of the record's settled fields (`_settled`): id, GPU, state, vast's status, price."""
    gpu = record.gpu_model or "unknown GPU"
    if record.num_gpus > 1:
        gpu = f"{record.num_gpus}x {gpu}"
    state = record.state.value
    if record.failure_reason is not None:
        state += f"({record.failure_reason.value})"
    if record.park_reason is not None:
        state += f"({record.park_reason.value})"
    parts = [f"#{record.instance_id}", gpu, state]
    if record.vast_status is not None and record.vast_status not in EXPECTED_VAST_STATUS[record.state]:
        parts.append(f"[vast: {record.vast_status}]")
    committed = committed_usd_per_h(record.state, record.park_reason, record.price_usd_per_h, record.storage_usd_per_h)
    if committed < record.price_usd_per_h:
        parts.append(f"${committed:.2f}/h storage (${record.price_usd_per_h:.2f}/h resumed)")
    else:
        parts.append(f"${record.price_usd_per_h:.2f}/h")
    return " ".join(parts)


def _moving_text(record: InstanceRecord, now_s: float, throughput_tasks_per_h: float | None) -> str:
    """What moves with the clock and the tasks: the uptime and the throughput."""
    uptime = f"{max(0.0, now_s - record.created_at_s) / 3600:.1f}h up"
    return uptime if throughput_tasks_per_h is None else f"{uptime} {throughput_tasks_per_h:.0f} tasks/h"


# what a line shows of its record that a task does not move (a completion moves the count, the last task's time,
# the throughput and the line's text)
LineKey = tuple[object, ...]


def _settled(record: InstanceRecord) -> LineKey:
    return (
        record.state,
        record.failure_reason,
        record.vast_status,
        record.gpu_model,
        record.num_gpus,
        record.price_usd_per_h,
        record.storage_usd_per_h,
        record.park_reason,
        record.host_id,
        record.machine_id,
        record.created_at_s,
        record.state_since_s,
        record.first_producing_s,
        record.parked_before_producing_s,
        record.bench_verdict,
        record.interruptible,
    )


@dataclass(slots=True)
class _Cached:
    """A shown line with what it was built from; updated in place when only what tasks move has moved."""

    settled: LineKey
    moving: tuple[object, ...]
    line: InstanceLine
    settled_text: str
    committed_usd_per_h: float


def _utc(at_s: float) -> datetime:
    return datetime.fromtimestamp(at_s, UTC)


def _moved(line: InstanceLine, update: dict[str, object]) -> InstanceLine:
    """`line.model_copy(update=update)`, built as pydantic builds that copy (a new instance over the old field
    values with `update` laid on them, its fields set growing by `update`'s names) less the generic `copy.copy` of
    each of its slots, which took a third of a 1000-line snapshot. A line is frozen and carries no extra fields or
    private attributes, so its values are shared, not copied (tests/fleet/test_lines.py compares the result with
    a line validated from scratch, field for field and fields set)."""
    moved = InstanceLine.__new__(InstanceLine)
    fields_set = line.__pydantic_fields_set__
    if not update.keys() <= fields_set:
        fields_set = fields_set | update.keys()
    # a frozen line's fields set never changes after it is built, so a line and its moved copy may share it
    _set(moved, "__dict__", {**line.__dict__, **update})
    _set(moved, "__pydantic_fields_set__", fields_set)
    _set(moved, "__pydantic_extra__", None)
    _set(moved, "__pydantic_private__", None)
    return moved


_set = object.__setattr__  # past pydantic's frozen-model guard, as pydantic's own copy sets these


class SnapshotLines:
    """Every snapshot's lines, each rebuilt only when what it shows changed.

    A 1000-instance fleet asked for a snapshot every few minutes rebuilt and validated 1000 lines each time
    (half of the week replay's time), while most of them showed the same thing. A line is rebuilt when its
    record changes, when its uptime moves by the 0.1 h it is shown with, or when its throughput moves by the
    whole task per hour it is shown with: the line's `throughput_tasks_per_h` is that shown figure.

    A producing machine completes a task every half minute, so its line moves at nearly every snapshot, but only
    in what a task moves. Such a line is the validated line of its settled fields with those four copied in
    (`_moved`, a leaner `model_copy`): the count and the moment come from fleet's own record, the throughput is
    rounded here, the text's settled part is kept, and the whole line is validated again whenever anything else
    about the instance changes.
    """

    def __init__(self) -> None:
        self._cached: dict[int, _Cached] = {}

    def lines(
        self, records: Iterable[InstanceRecord], now_s: float, throughput_window_s: float
    ) -> tuple[list[InstanceLine], float]:
        """The lines of `records` in their order, and what they commit per hour added up in that order (the
        snapshot's spend, from each line's figure kept with it rather than worked out again per snapshot). Lines
        kept for instances not among `records` (gone or forgotten) are dropped."""
        lines: list[InstanceLine] = []
        spend = 0.0
        for record in records:
            cached = self._line(record, now_s, record.throughput_tasks_per_h(now_s, throughput_window_s))
            lines.append(cached.line)
            spend += cached.committed_usd_per_h
        # every line just shown is kept, so a cache no larger than the snapshot holds nothing else to drop
        if len(self._cached) > len(lines):
            self._forget({line.instance_id for line in lines})
        return lines, spend

    def _line(self, record: InstanceRecord, now_s: float, throughput_tasks_per_h: float | None) -> _Cached:
        shown_throughput = None if throughput_tasks_per_h is None else float(round(throughput_tasks_per_h))
        uptime_tenth_h = round(max(0.0, now_s - record.created_at_s) / 360)
        # the text shows the settled fields, the throughput and the uptime; not the count or the last task
        moving = (record.last_task_at_s, record.tasks_completed, shown_throughput, uptime_tenth_h)
        settled = _settled(record)
        cached = self._cached.get(record.instance_id)
        if cached is None or cached.settled != settled:
            return self._built(record, now_s, shown_throughput, settled, moving)
        if cached.moving == moving:
            return cached
        # only what moved is worked out again: a task moves the first two, the clock the last two
        last_task_s, tasks_completed, throughput, uptime = cached.moving
        update: dict[str, object] = {}
        if record.last_task_at_s != last_task_s:
            update["last_task_at"] = _utc(record.last_task_at_s) if record.last_task_at_s is not None else None
        if record.tasks_completed != tasks_completed:
            update["tasks_completed"] = record.tasks_completed
        if shown_throughput != throughput or uptime_tenth_h != uptime:
            update["throughput_tasks_per_h"] = shown_throughput
            update["line"] = _text(cached.settled_text, record, now_s, shown_throughput)
        cached.line = _moved(cached.line, update)
        cached.moving = moving
        return cached

    def _built(
        self,
        record: InstanceRecord,
        now_s: float,
        shown_throughput: float | None,
        settled: LineKey,
        moving: tuple[object, ...],
    ) -> _Cached:
        """The whole line validated from the record: new, or something settled about it changed."""
        settled_text = _settled_text(record)
        line = InstanceLine(
            instance_id=record.instance_id,
            state=record.state,
            failure_reason=record.failure_reason,
            park_reason=record.park_reason,
            vast_status=record.vast_status,
            gpu_model=record.gpu_model,
            num_gpus=record.num_gpus,
            price_usd_per_h=record.price_usd_per_h,
            storage_usd_per_h=record.storage_usd_per_h,
            host_id=record.host_id,
            machine_id=record.machine_id,
            created_at=_utc(record.created_at_s),
            state_since=_utc(record.state_since_s),
            first_producing_at=_utc(record.first_producing_s) if record.first_producing_s is not None else None,
            parked_before_producing_s=record.parked_before_producing_s,
            last_task_at=_utc(record.last_task_at_s) if record.last_task_at_s is not None else None,
            tasks_completed=record.tasks_completed,
            throughput_tasks_per_h=shown_throughput,
            bench_verdict=record.bench_verdict,
            interruptible=record.interruptible,
            line=_text(settled_text, record, now_s, shown_throughput),
        )
        fresh = _Cached(settled, moving, line, settled_text, line.committed_usd_per_h)
        self._cached[record.instance_id] = fresh
        return fresh

    def _forget(self, kept_ids: set[int]) -> None:
        """Drop the lines of instances no longer shown (gone or forgotten)."""
        for instance_id in [i for i in self._cached if i not in kept_ids]:
            del self._cached[instance_id]
