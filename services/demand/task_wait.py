"""How long each task waited in the queue: from its `submitted` event to its `started` event, by the events' own
times (never the clock), so a replayed trace measures what the job system lived through."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime

# A task submitted and never started (cancelled, or its start lost) would stay forever: the oldest entries go
# first past this many, which is ten times the largest queue the demand benchmarks replay.
SUBMITTED_TASKS_KEPT = 100_000


class TaskWaits:
    """Submit times of tasks not yet started; `started` answers the wait of one that has."""

    def __init__(self, kept: int = SUBMITTED_TASKS_KEPT) -> None:
        self._submitted_at: OrderedDict[str, datetime] = OrderedDict()
        self._kept = kept

    def submitted(self, task_id: str, at: datetime) -> None:
        self._submitted_at[task_id] = at
        self._submitted_at.move_to_end(task_id)
        while len(self._submitted_at) > self._kept:
            self._submitted_at.popitem(last=False)

    def started(self, task_id: str, at: datetime) -> float | None:
        """Seconds from submission to start; None when its submission was not seen (before a restart, or
        forgotten). A start stamped before its submission (clocks of two job-system hosts) counts as no wait."""
        submitted_at = self._submitted_at.pop(task_id, None)
        if submitted_at is None:
            return None
        return max(0.0, (at - submitted_at).total_seconds())

    def __len__(self) -> int:
        return len(self._submitted_at)
