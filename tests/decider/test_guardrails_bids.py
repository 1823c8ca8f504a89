"""The guardrails and interruptible launches: never the last producers interruptible while tasks wait."""

from __future__ import annotations

from datetime import UTC, datetime

from services.decider.guardrails import GuardrailConfig, check, ledger_from
from shared.contract import LaunchInstances, LaunchReason
from tests.decider.factories import producing, signal, snapshot

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
CONFIG = GuardrailConfig(
    budget_usd_per_h=20.0,
    max_instances=40,
    normal_max_price_usd_per_h=0.8,
    emergency_max_price_usd_per_h=1.2,
    min_producers_while_queued=2,
)


def bid_launch(count: int, interruptible: int) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW, source="decider", idempotency_key=f"bids-{count}-{interruptible}", requested_by="policy",
        count=count, launch_priority="normal", reason=LaunchReason.SUSTAINED_DEMAND, interruptible=interruptible,
    )  # fmt: skip


def test_with_tasks_queued_and_nobody_producing_the_first_machines_are_on_demand() -> None:
    book = ledger_from(snapshot(NOW, []), signal(NOW, pending=40, rate_per_h=600), [], NOW, stale=False)
    verdict, _ = check(bid_launch(5, interruptible=5), book, NOW, CONFIG)
    assert verdict.verdict == "allowed"
    granted = verdict.action
    assert isinstance(granted, LaunchInstances)
    assert (granted.count, granted.interruptible) == (5, 3)  # two on-demand first: the floor while queued
    assert "2 on-demand first" in verdict.explanation


def test_with_producers_serving_the_queue_every_asked_bid_goes_through() -> None:
    book = ledger_from(snapshot(NOW, producing(3, NOW)), signal(NOW, pending=40, rate_per_h=600), [], NOW, stale=False)
    verdict, _ = check(bid_launch(5, interruptible=4), book, NOW, CONFIG)
    assert isinstance(verdict.action, LaunchInstances) and verdict.action.interruptible == 4


def test_a_launch_trimmed_by_the_budget_keeps_no_more_bids_than_machines() -> None:
    tight = GuardrailConfig(
        budget_usd_per_h=3.5, max_instances=40, normal_max_price_usd_per_h=0.8, emergency_max_price_usd_per_h=1.2
    )
    book = ledger_from(snapshot(NOW, producing(3, NOW)), signal(NOW, rate_per_h=600), [], NOW, stale=False)
    verdict, _ = check(bid_launch(5, interruptible=5), book, NOW, tight)
    granted = verdict.action
    assert isinstance(granted, LaunchInstances)
    assert (granted.count, granted.interruptible) == (2, 2)  # $2 of room at up to $0.80/h each
