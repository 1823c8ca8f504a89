"""The budget, enforced by the provisioner itself (defense in depth, whatever the decider believes).

Two hard limits: the total $/h of every instance that is not gone, and the number of such instances. A
launch either fits whole or is refused whole; each single rent is checked again just before it happens, with
a small price margin because an offer's price can move between search and rent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.provisioner.ranking import RankedOffer
from shared.contract import InstanceState, LaunchPriority, RefusalRule


@dataclass(frozen=True)
class BudgetLimits:
    budget_usd_per_h: float
    max_instances: int
    normal_max_price_usd_per_h: float
    emergency_max_price_usd_per_h: float
    price_margin: float = 0.05

    def price_cap(self, priority: LaunchPriority, command_cap_usd_per_h: float | None = None) -> float:
        """Per-instance price cap: `emergency` may pay more than `normal`; a command can only lower it."""
        cap = self.emergency_max_price_usd_per_h if priority == "emergency" else self.normal_max_price_usd_per_h
        return cap if command_cap_usd_per_h is None else min(cap, command_cap_usd_per_h)

    def reserved_usd_per_h(self, price_usd_per_h: float) -> float:
        return price_usd_per_h * (1.0 + self.price_margin)


@dataclass(frozen=True)
class Commitment:
    """What the fleet already costs: $/h and count of every instance that is not gone."""

    usd_per_h: float = 0.0
    instances: int = 0

    def plus(self, usd_per_h: float) -> Commitment:
        return Commitment(self.usd_per_h + usd_per_h, self.instances + 1)


@dataclass(frozen=True)
class Refusal:
    rule: RefusalRule
    detail: str


def commitment_of(priced_states: Iterable[tuple[float, InstanceState]]) -> Commitment:
    """(committed $/h, state) of every known instance → the commitment. Only `gone` frees the instance: a stopped
    or failed one still exists on vast until it is destroyed (a parked one commits its storage alone)."""
    commitment = Commitment()
    for price_usd_per_h, state in priced_states:
        if state is not InstanceState.GONE:
            commitment = commitment.plus(price_usd_per_h)
    return commitment


def fits(limits: BudgetLimits, commitment: Commitment, price_usd_per_h: float) -> bool:
    """May one more instance at this price be rented now?"""
    return (
        commitment.instances + 1 <= limits.max_instances
        and commitment.usd_per_h + limits.reserved_usd_per_h(price_usd_per_h) <= limits.budget_usd_per_h + 1e-9
    )


def resume_refusal(
    limits: BudgetLimits, commitment: Commitment, committed_usd_per_h: float, price_usd_per_h: float
) -> Refusal | None:
    """A resume is budgeted like a launch at the instance's full price, less what it already commits (its
    storage); it adds no instance, since a parked one is counted already."""
    after_usd_per_h = commitment.usd_per_h - committed_usd_per_h + limits.reserved_usd_per_h(price_usd_per_h)
    if after_usd_per_h <= limits.budget_usd_per_h + 1e-9:
        return None
    return Refusal(
        RefusalRule.BUDGET_USD_PER_H,
        f"${commitment.usd_per_h:.2f}/h committed, resuming at ${price_usd_per_h:.2f}/h (with a "
        f"{limits.price_margin:.0%} price margin, less its ${committed_usd_per_h:.2f}/h storage) would exceed the "
        f"budget ${limits.budget_usd_per_h:.2f}/h",
    )


def pick_next(
    limits: BudgetLimits,
    commitment: Commitment,
    candidates: Sequence[RankedOffer],
    still_needed: int,
) -> RankedOffer | None:
    """The best-ranked candidate that leaves room for the `still_needed - 1` cheapest others; None if none does.

    Greedy by rank, but never into a corner: taking a good, pricier offer first must not make the rest of the
    launch unaffordable when a cheaper mix would have fitted.
    """
    remaining_usd_per_h = limits.budget_usd_per_h - commitment.usd_per_h + 1e-9
    if commitment.instances + still_needed > limits.max_instances or still_needed < 1:
        return None
    for i, candidate in enumerate(candidates):
        others = sorted(limits.reserved_usd_per_h(c.price_usd_per_h) for j, c in enumerate(candidates) if j != i)
        if len(others) < still_needed - 1:
            return None
        needed_usd_per_h = limits.reserved_usd_per_h(candidate.price_usd_per_h) + sum(others[: still_needed - 1])
        if needed_usd_per_h <= remaining_usd_per_h:
            return candidate
    return None


def plan_launch(
    limits: BudgetLimits, commitment: Commitment, ranked: Sequence[RankedOffer], count: int
) -> list[RankedOffer] | Refusal:
    """The offers a launch of `count` would rent, in order, or why it is refused whole."""
    if commitment.instances + count > limits.max_instances:
        return Refusal(
            RefusalRule.MAX_INSTANCES,
            f"{commitment.instances} instances + {count} would exceed max_instances {limits.max_instances}",
        )
    if len(ranked) < count:
        return Refusal(RefusalRule.NO_OFFER, f"{len(ranked)} acceptable offers for {count} instances")
    cheapest = sorted(limits.reserved_usd_per_h(r.price_usd_per_h) for r in ranked)[:count]
    if commitment.usd_per_h + sum(cheapest) > limits.budget_usd_per_h + 1e-9:
        return Refusal(
            RefusalRule.BUDGET_USD_PER_H,
            f"${commitment.usd_per_h:.2f}/h committed + at least ${sum(cheapest):.2f}/h for {count} instances "
            f"(with a {limits.price_margin:.0%} price margin) would exceed the budget ${limits.budget_usd_per_h:.2f}/h",
        )
    plan: list[RankedOffer] = []
    left = list(ranked)
    for needed in range(count, 0, -1):
        choice = pick_next(limits, commitment, left, needed)
        if choice is None:  # cannot happen after the checks above; kept as a refusal rather than a crash
            return Refusal(RefusalRule.BUDGET_USD_PER_H, "no affordable combination of offers")
        plan.append(choice)
        commitment = commitment.plus(limits.reserved_usd_per_h(choice.price_usd_per_h))
        left.remove(choice)
    return plan
