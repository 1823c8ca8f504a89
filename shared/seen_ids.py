"""Bounded memory of the event ids a service has processed, so a redelivered event is applied once."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class SeenIds:
    """The last `capacity` ids, the oldest forgotten first: a redelivery comes within seconds to minutes, so only
    recent ids need remembering, and the memory stays the same size however long the service runs."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, event_id: str) -> bool:
        """Whether this id is new; it is remembered from now on."""
        if event_id in self._ids:
            return False
        self._remember(event_id)
        return True

    def load(self, ids: Iterable[str]) -> None:
        for event_id in ids:
            self._remember(event_id)

    def _remember(self, event_id: str) -> None:
        self._ids[event_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)


class CompletedTasks:
    """The last `capacity` completed tasks, so a task's completion counts once. A job system that replays a
    completion (a resent batch, a retried publish) gives it a fresh event id, which SeenIds cannot recognise: one
    task replayed 400 times read as a machine doing 12,000 tasks/h. fleet and demand both keep one."""

    def __init__(self, capacity: int) -> None:
        self._keys = SeenIds(capacity)

    def first_completion(self, task_type: str, task_id: str) -> bool:
        """Whether this task has not completed before (within memory); it counts as completed from now on.

        Keyed by type and id: the contract does not promise ids unique across task types. The type's length
        leads the key, so no other (type, id) pair spells the same one."""
        return self._keys.first_time(f"{len(task_type)}:{task_type}:{task_id}")

    def __len__(self) -> int:
        return len(self._keys)
