"""The markup of a launch's interruptible bids, from the outbid rate fleet observed for its GPU models."""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.decider.policy.config import PolicyConfig
from shared.contract.fleet import BidOutcome


@dataclass(frozen=True)
class BidChoice:
    """The markup a launch's bids get, from the outbid rate observed for its GPU models (None: too few hours
    observed to say). `markup` None: the market pauses our bids too often for any bid to pay."""

    markup: float | None
    outbid_pauses: int = 0
    interruptible_machine_h: float = 0.0
    outbid_rate_per_h: float | None = None

    def describe(self) -> str:
        observed = (
            f"{self.outbid_pauses} outbid pauses in {self.interruptible_machine_h:.0f} interruptible machine-h"
            + (f" ({self.outbid_rate_per_h:.3f}/h)" if self.outbid_rate_per_h is not None else ", too few to judge")
        )
        if self.markup is None:
            return f"no bids: {observed}"
        return f"bids at min_bid × {1 + self.markup:.2f}: {observed}"


def bid_choice(outcomes: list[BidOutcome], gpu_models: tuple[str, ...], config: PolicyConfig) -> BidChoice:
    """The markup for bids on these GPU models (any model when none is named), from fleet's window.

    The base markup while the rate is at or below the target; one step more for each doubling above it; no bid
    at all where that passes the cap."""
    relevant = [o for o in outcomes if o.gpu_model in gpu_models] if gpu_models else outcomes
    machine_h = sum(o.interruptible_machine_h for o in relevant)
    pauses = sum(o.outbid_pauses for o in relevant)
    if machine_h < config.bid_min_observed_machine_h:
        return BidChoice(config.bid_markup, pauses, machine_h)
    rate_per_h = pauses / machine_h
    steps = 0
    if rate_per_h > config.bid_outbid_target_per_h:
        steps = math.ceil(math.log2(rate_per_h / config.bid_outbid_target_per_h))
    markup = config.bid_markup + steps * config.bid_markup_step
    if markup > config.bid_markup_cap + 1e-9:
        return BidChoice(None, pauses, machine_h, rate_per_h)
    return BidChoice(round(markup, 6), pauses, machine_h, rate_per_h)
