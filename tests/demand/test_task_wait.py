"""Task wait: from a task's submitted event to its started event, by the events' own times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from services.demand.metrics import DemandMetrics
from services.demand.records import IngestOutcome
from services.demand.task_wait import TaskWaits
from shared.contract import TaskEvent
from shared.contract.demand import TaskEventKind

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def task(kind: TaskEventKind, task_id: str, at: datetime) -> TaskEvent:
    return TaskEvent(occurred_at=at, source="jobs", kind=kind, task_id=task_id)


def test_the_wait_is_from_submission_to_start() -> None:
    waits = TaskWaits()
    waits.submitted("a", T0)
    assert waits.started("a", T0 + timedelta(minutes=12)) == 720.0
    assert waits.started("a", T0 + timedelta(minutes=13)) is None  # measured once
    assert len(waits) == 0


def test_a_start_without_its_submission_is_not_a_wait() -> None:
    assert TaskWaits().started("never-seen", T0) is None


def test_a_start_stamped_before_its_submission_waited_nothing() -> None:
    waits = TaskWaits()
    waits.submitted("a", T0)
    assert waits.started("a", T0 - timedelta(seconds=2)) == 0.0


def test_the_oldest_submissions_are_forgotten_past_the_limit() -> None:
    waits = TaskWaits(kept=2)
    for n, task_id in enumerate(("a", "b", "c")):
        waits.submitted(task_id, T0 + timedelta(seconds=n))
    assert len(waits) == 2
    assert waits.started("a", T0 + timedelta(minutes=1)) is None
    assert waits.started("c", T0 + timedelta(minutes=1)) == 58.0


def test_demand_metrics_observe_each_started_tasks_wait() -> None:
    registry = CollectorRegistry()
    metrics = DemandMetrics(registry)
    metrics.ingested(task("submitted", "a", T0), IngestOutcome.APPLIED)
    metrics.ingested(task("submitted", "b", T0), IngestOutcome.APPLIED)
    metrics.ingested(task("started", "a", T0 + timedelta(seconds=20)), IngestOutcome.APPLIED)
    metrics.ingested(task("started", "b", T0 + timedelta(minutes=45)), IngestOutcome.APPLIED)
    assert registry.get_sample_value("fleetpilot_demand_task_wait_seconds_count") == 2
    assert registry.get_sample_value("fleetpilot_demand_task_wait_seconds_sum") == 20 + 45 * 60
    assert registry.get_sample_value("fleetpilot_demand_task_wait_seconds_bucket", {"le": "30.0"}) == 1
    assert registry.get_sample_value("fleetpilot_demand_task_events_total", {"kind": "started"}) == 2
