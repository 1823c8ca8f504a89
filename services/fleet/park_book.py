"""fleet's book of how our parked machines fared over a trailing window: how long each waited before a resume
that worked, before a resume that found its GPU rented by someone else, or before it was given back unresumed.
The decider sizes the parked pool and trusts a parked machine from these (services/decider/policy/parking.py)."""

from __future__ import annotations

from collections import deque
from typing import Literal

from shared.contract.fleet import ParkOutcomes

ParkEnd = Literal["resumed", "taken", "given_back"]
PARK_ENDS: tuple[ParkEnd, ...] = ("resumed", "taken", "given_back")
# per kind, the most recent ones: a few hundred numbers whatever the fleet's size, and what the snapshot carries
MAX_KEPT = 200


class ParkBook:
    """Per way a park ended, (when it ended, hours parked before) over the trailing `window_s`, newest last."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.ends: dict[ParkEnd, deque[tuple[float, float]]] = {end: deque(maxlen=MAX_KEPT) for end in PARK_ENDS}
        # every snapshot carries the outcomes, and they change only when a park ends or one leaves the window
        self._shown: tuple[dict[ParkEnd, list[float]], ParkOutcomes] | None = None

    def book(self, end: ParkEnd, parked_s: float, at_s: float) -> None:
        self.ends[end].append((at_s, round(max(0.0, parked_s) / 3600, 4)))

    def outcomes(self, now_s: float) -> ParkOutcomes | None:
        """None while no park ended in the window: the decider then plans from its priors."""
        recent = {end: [h for at_s, h in kept if at_s >= now_s - self.window_s] for end, kept in self.ends.items()}
        if not any(recent.values()):
            return None
        if self._shown is not None and self._shown[0] == recent:
            return self._shown[1]
        outcomes = ParkOutcomes(
            window_s=self.window_s,
            resumed_after_h=recent["resumed"],
            taken_after_h=recent["taken"],
            given_back_after_h=recent["given_back"],
        )
        self._shown = (recent, outcomes)
        return outcomes

    def to_dict(self) -> dict[str, list[tuple[float, float]]]:
        return {end: list(kept) for end, kept in self.ends.items()}

    def restore(self, saved: dict[str, list[tuple[float, float]]]) -> None:
        for end in PARK_ENDS:
            self.ends[end].extend((float(at_s), round(float(h), 4)) for at_s, h in saved.get(end, []))
