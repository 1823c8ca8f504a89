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
