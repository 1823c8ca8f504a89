"""fleet's book of its bids per GPU model: machine-hours exposed to the market and outbid pauses, over a window."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shared.contract.fleet import BidOutcome

# A bid's exposure is booked in this many slices of the trailing window: the window's far edge is exact to one
# slice (an hour of a day), and the book stays a few dozen numbers per GPU model however many bids come and go.
BID_SLICES_PER_WINDOW = 24


@dataclass
class _ModelBids:
    """One GPU model's bids: how many are exposed now, and the trailing window's slices, oldest first."""

    exposed: int = 0
    since_s: float = 0.0  # since when `exposed` holds: its machine-seconds are not booked in a slice yet
    # [slice start s, machine-seconds exposed, outbid pauses]
    slices: deque[list[float]] = field(default_factory=deque)


class BidBook:
    """Per GPU model, over a trailing window: machine-hours our bids were exposed to the market (up, loading,
    or paused by a higher bid) and how many times one was paused. The decider sets bids from the ratio.

    Every change costs O(1) amortised (a week's replay moves 1000+ bids through it), a query O(slices)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.slice_s = window_s / BID_SLICES_PER_WINDOW
        self.models: dict[str, _ModelBids] = {}

    def expose(self, gpu_model: str, change: int, at_s: float) -> None:
        """`change` more (or fewer) bids of this model exposed from `at_s` on."""
        bids = self._booked_to(gpu_model, at_s)
        bids.exposed = max(0, bids.exposed + change)

    def pause(self, gpu_model: str, at_s: float) -> None:
        bids = self._booked_to(gpu_model, at_s)
        self._slice(bids, bids.since_s)[2] += 1

    def outcomes(self, now_s: float) -> list[BidOutcome]:
        window_start_s = now_s - self.window_s
        outcomes = []
        for gpu_model, bids in sorted(self.models.items()):
            self._prune(bids, now_s)
            open_s = max(0.0, now_s - max(bids.since_s, window_start_s))
            machine_s = sum(entry[1] for entry in bids.slices) + bids.exposed * open_s
            pauses = round(sum(entry[2] for entry in bids.slices))
            if machine_s > 0 or pauses:
                outcomes.append(
                    BidOutcome(
                        gpu_model=gpu_model,
                        interruptible_machine_h=round(machine_s / 3600, 6),
                        outbid_pauses=pauses,
                        window_s=self.window_s,
                    )
                )
        return outcomes

    def to_dict(self) -> dict[str, tuple[int, float, list[list[float]]]]:
        return {
            model: (bids.exposed, bids.since_s, [list(entry) for entry in bids.slices])
            for model, bids in self.models.items()
        }

    def restore(self, saved: dict[str, tuple[int, float, list[list[float]]]], now_s: float) -> None:
        """The saved book, its bids counted exposed until `now_s` (bids stay up while fleet is down, and hours
        left out would overstate the outbid rate). Who is exposed from then on is rebuilt from the records."""
        for gpu_model, (exposed, since_s, slices) in saved.items():
            self.models[gpu_model] = _ModelBids(exposed, since_s, deque(list(entry) for entry in slices))
            self._booked_to(gpu_model, now_s).exposed = 0

    def _booked_to(self, gpu_model: str, at_s: float) -> _ModelBids:
        """The model's exposure booked up to `at_s` (a late event counts at the latest booked moment)."""
        bids = self.models.get(gpu_model)
        if bids is None:
            bids = self.models[gpu_model] = _ModelBids(since_s=at_s)
        at_s = max(at_s, bids.since_s)
        if bids.exposed:
            moment_s = max(bids.since_s, at_s - self.window_s)
            while moment_s < at_s:
                entry = self._slice(bids, moment_s)
                end_s = min(at_s, entry[0] + self.slice_s)
                entry[1] += bids.exposed * (end_s - moment_s)
                moment_s = end_s
        bids.since_s = at_s
        self._prune(bids, at_s)
        return bids

    def _slice(self, bids: _ModelBids, at_s: float) -> list[float]:
        start_s = (at_s // self.slice_s) * self.slice_s
        if not bids.slices or bids.slices[-1][0] < start_s:
            bids.slices.append([start_s, 0.0, 0])
        return bids.slices[-1]

    def _prune(self, bids: _ModelBids, now_s: float) -> None:
        """Slices wholly before the window go; the one the window's edge cuts is kept whole."""
        while bids.slices and bids.slices[0][0] + self.slice_s <= now_s - self.window_s:
            bids.slices.popleft()
