"""The budget, enforced by the provisioner itself (defense in depth, whatever the decider believes).

Three hard limits: the total $/h of every instance that is not gone, the number of such instances, and the
day's spend (UTC): what the fleet cost since midnight, plus what it and a new rent commit until the next one,
plus the rent's one-off charges (its image pull at the host's $/GB), which no hourly price shows. A launch
either fits whole or is refused whole; each single rent is checked again just before it happens, with a small
price margin because an offer's price can move between search and rent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from pydantic import BaseModel, ConfigDict, Field

from services.provisioner.ranking import RankedOffer
from shared.contract import InstanceState, LaunchPriority, RefusalRule

HOURS_PER_DAY = 24.0


@dataclass(frozen=True)
class BudgetLimits:
    budget_usd_per_h: float
    max_instances: int
    normal_max_price_usd_per_h: float
    emergency_max_price_usd_per_h: float
    price_margin: float = 0.05
    daily_budget_usd: float | None = None  # None: the hourly budget all day long

    @property
    def daily_cap_usd(self) -> float:
        if self.daily_budget_usd is not None:
            return self.daily_budget_usd
        return self.budget_usd_per_h * HOURS_PER_DAY

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


class DaySpend(BaseModel):
    """What the fleet cost since midnight UTC: its committed $/h accrued at each instance list, plus each rent's
    one-off charges. Persisted, so a restart neither forgets the morning nor counts it twice."""

    model_config = ConfigDict(extra="forbid")

    day: date
    spent_usd: float = Field(default=0.0, ge=0)
    accrued_until: datetime | None = None

    @classmethod
    def starting(cls, now: datetime) -> DaySpend:
        return cls(day=now.astimezone(UTC).date(), accrued_until=now)

    def accrued(self, usd_per_h: float, now: datetime) -> DaySpend:
        """`usd_per_h` ran from the last accrual until `now`; a new day keeps only what ran since its midnight."""
        today = now.astimezone(UTC).date()
        since = self.accrued_until or now
        spent = self.spent_usd
        if today != self.day:
            since, spent = max(since, _midnight(today)), 0.0
        hours = max(0.0, (now - since).total_seconds() / 3600)
        return DaySpend(day=today, spent_usd=spent + usd_per_h * hours, accrued_until=now)

    def charged(self, usd: float) -> DaySpend:
        return self.model_copy(update={"spent_usd": self.spent_usd + max(0.0, usd)})


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def day_refusal(
    limits: BudgetLimits,
    spent: DaySpend,
    commitment: Commitment,
    added_usd_per_h: float,
    one_off_usd: float,
    now: datetime,
) -> Refusal | None:
    """May the fleet take on `added_usd_per_h` more (and `one_off_usd` now) without today's spend passing the
    daily cap? Today's spend is what was spent plus what the fleet, the addition included, commits until
    midnight UTC: a rent is refused when keeping it (and what already runs) to the day's end would pass the cap."""
    hours_left = (_midnight(now.astimezone(UTC).date() + timedelta(days=1)) - now).total_seconds() / 3600
    projected = spent.spent_usd + (commitment.usd_per_h + added_usd_per_h) * hours_left + one_off_usd
    if projected <= limits.daily_cap_usd + 1e-9:
        return None
    return Refusal(
        RefusalRule.DAILY_BUDGET_USD,
        f"${spent.spent_usd:.2f} spent today + ${commitment.usd_per_h:.2f}/h committed and ${added_usd_per_h:.2f}/h "
        f"more for the {hours_left:.1f} h to midnight UTC + ${one_off_usd:.2f} one-off (image pull) = "
        f"${projected:.2f}, over the daily cap ${limits.daily_cap_usd:.2f}",
    )


def pull_breaks_the_day(
    limits: BudgetLimits, spent: DaySpend, commitment: Commitment, offer: RankedOffer, now: datetime
) -> bool:
    """Would this one rent pass today's cap on its hourly price, yet not with its one-off image pull? The pull is
    the offer's own charge, like a price above the cap: the offer is left out, and the launch rents the others
    (one host at 50 $/GB refused a whole launch of sane offers). A rent the day cannot take at its hourly price
    stays a refusal of the launch, as before."""
    added_usd_per_h = limits.reserved_usd_per_h(offer.price_usd_per_h)
    return (
        day_refusal(limits, spent, commitment, added_usd_per_h, 0.0, now) is None
        and day_refusal(limits, spent, commitment, added_usd_per_h, offer.pull_cost_usd, now) is not None
    )


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
