"""vast.ai's rules of time and money that do not depend on one instance's history: how long an image pull takes
over a machine's link, what it downloads, and the interruptible market's competing bid per GPU model.

Pure: plain values in, values out; the bid walk draws from the random stream it is given. The world simulator can
import these to start and bill machines the way the vast.ai simulator does.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

# the rules the provisioner itself prices and ranks with: the simulators apply the very same
from services.provisioner.vast_models import pull_s, storage_usd_per_h
from sim.vast.scenario import BidMarket, StartupSpec, StopStart

__all__ = ["BidLevels", "gpu_taken_chance", "outbid", "pull_s", "pulled_gb", "storage_usd_per_h"]


def pulled_gb(startup: StartupSpec, *, cached: bool) -> float:
    """What a first start downloads: the whole image, or only what the machine's cache lacks."""
    return startup.image_gb * (startup.cached_pull_share if cached else 1.0)


def gpu_taken_chance(rules: StopStart, stopped_s: float) -> float:
    """The chance that another renter took a stopped instance's GPU in `stopped_s`: 1 − exp(−rate × hours)."""
    return 1.0 - math.exp(-rules.gpu_taken_per_stopped_h * stopped_s / 3600.0)


def outbid(bid_usd_per_h: float, on_demand_usd_per_h: float, competing_share: float) -> bool:
    """Whether an interruptible instance must pause: a higher bid wants its machine, or an on-demand renter does
    (a share of 1 or more: on-demand outranks every bid, whatever its price)."""
    if competing_share >= 1.0:
        return True
    return bid_usd_per_h < competing_share * on_demand_usd_per_h


@dataclass
class BidLevels:
    """Other renters' competing bid for each GPU model, as a share of a machine's on-demand price."""

    spec: BidMarket
    rng: random.Random
    shares: dict[str, float] = field(default_factory=dict)

    def add_model(self, gpu_name: str) -> None:
        if gpu_name not in self.shares:
            start = self.spec.start_share
            self.shares[gpu_name] = self._bounded(self.rng.uniform(start.min, start.max))

    def share(self, gpu_name: str) -> float:
        return self.shares.get(gpu_name, 0.0)

    def set_share(self, gpu_name: str, share: float) -> None:
        self.shares[gpu_name] = share

    def tick(self, tick_h: float) -> None:
        """One step of every model's walk (sorted, so the draws do not depend on insertion order)."""
        if self.spec.volatility_per_h <= 0:
            return
        sigma = self.spec.volatility_per_h * math.sqrt(tick_h)
        for gpu_name in sorted(self.shares):
            self.shares[gpu_name] = self._bounded(self.shares[gpu_name] + self.rng.gauss(0.0, sigma))

    def _bounded(self, share: float) -> float:
        bounds = self.spec.share_bounds
        return min(max(share, bounds.min), bounds.max)
