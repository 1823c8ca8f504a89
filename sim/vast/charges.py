"""What the account was charged, day by day, as vast.ai's `GET /api/v0/invoices?type=charge` lists it: one row
per instance, per kind (GPU, storage, bandwidth) and per UTC day, with its quantity, rate and amount.

The world keeps each instance's running totals (its ledger entry); a charge for a day is what the totals grew by
over it. The totals at each midnight are taken when the world is first asked anything after it, before that
request changes anything, so they are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

Totals = tuple[float, float, float, float, float, float]  # gpu s, gpu $, storage s, storage $, download GB, bw $
KINDS = (("GPU", "hours", 0, 1, 3600.0), ("storage", "hours", 2, 3, 3600.0), ("bandwidth", "GB", 4, 5, 1.0))


@dataclass
class DailyCharges:
    """Each instance's totals at every UTC midnight the world went through."""

    totals_at: Callable[[int, datetime], Totals | None]  # an instance's totals at a moment (None: not yet created)
    marked_until: date | None = None
    marks: dict[date, dict[int, Totals]] = field(default_factory=dict)

    def mark(self, instance_ids: Iterable[int], now: datetime) -> None:
        """Take the totals at each midnight since the last mark, up to `now`."""
        today = now.astimezone(UTC).date()
        if self.marked_until is None:
            self.marked_until = today
            return
        ids = list(instance_ids)
        while self.marked_until < today:
            self.marked_until += timedelta(days=1)
            midnight = datetime.combine(self.marked_until, time(0), tzinfo=UTC)
            self.marks[self.marked_until] = {
                i: totals for i in ids if (totals := self.totals_at(i, midnight)) is not None
            }

    def rows(self, instance_ids: Iterable[int], now: datetime, since: datetime | None = None) -> list[dict[str, Any]]:
        """vast's charge rows, oldest day first; `since` leaves out the days that ended before it."""
        ids = sorted(instance_ids)
        today = now.astimezone(UTC).date()
        live = {i: t for i in ids if (t := self.totals_at(i, now)) is not None}
        # marks[d] holds the totals as day d began: the day before it is their growth since the mark before
        periods = [(d - timedelta(days=1), self.marks[d]) for d in sorted(self.marks)] + [(today, live)]
        rows: list[dict[str, Any]] = []
        previous: dict[int, Totals] = {}
        for day, current in periods:
            start = datetime.combine(day, time(0), tzinfo=UTC)
            if since is None or start + timedelta(days=1) > since:
                rows += _day_rows(previous, current, start)
            previous = current
        return rows


def _day_rows(before: dict[int, Totals], after: dict[int, Totals], day_start: datetime) -> list[dict[str, Any]]:
    rows = []
    for instance_id, totals in sorted(after.items()):
        earlier = before.get(instance_id, (0.0,) * 6)
        for kind, unit, quantity_at, amount_at, per_unit in KINDS:
            amount = totals[amount_at] - earlier[amount_at]
            if amount <= 1e-9:
                continue
            quantity = (totals[quantity_at] - earlier[quantity_at]) / per_unit
            rate = amount / quantity if quantity > 0 else 0.0
            rows.append(
                {
                    "type": "charge",
                    "description": f"Instance {instance_id} {kind} charge: {quantity:.3f} {unit} * ${rate:.4f}",
                    "timestamp": int(day_start.timestamp()),
                    "quantity": f"{quantity:.3f}",
                    "rate": f"{rate:.4f}",
                    "amount": f"{amount:.6f}",
                    "instance_id": instance_id,
                }
            )
    return rows
