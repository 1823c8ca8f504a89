"""vast.ai's rules of time and money that do not depend on one instance's history: how long an image pull takes
over a machine's link, what it downloads, and the interruptible market's competing bid per GPU model.

Pure: plain values in, values out; the bid walk draws from the random stream it is given. The world simulator can
import these to start and bill machines the way the vast.ai simulator does.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from sim.vast.scenario import BidMarket, StartupSpec

HOURS_PER_MONTH = 730.0  # vast prices storage per GB-month
MEGABITS_PER_GB = 8000.0  # vast's `inet_down` is in Mb/s, images in GB
SLOWEST_LINK_MBPS = 1.0  # a listed link of 0 Mb/s would make a pull infinite; vast lists none that slow


def storage_usd_per_h(storage_usd_per_gb_month: float, disk_gb: float) -> float:
    """What an instance's disk costs an hour, in every state but gone (and offline)."""
    return storage_usd_per_gb_month * disk_gb / HOURS_PER_MONTH


def pulled_gb(startup: StartupSpec, *, cached: bool) -> float:
    """What a first start downloads: the whole image, or only what the machine's cache lacks."""
    return startup.image_gb * (startup.cached_pull_share if cached else 1.0)


def pull_s(gb: float, inet_down_mbps: float) -> float:
    """Seconds to download `gb` at the machine's listed `inet_down` (the best a pull can do)."""
    if gb <= 0:
        return 0.0
    return gb * MEGABITS_PER_GB / max(inet_down_mbps, SLOWEST_LINK_MBPS)


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
