"""The policy's throughput per machine on a fleet of several GPU models: each producer at its model's pace."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.decider.policy.forecast import throughput_per_machine
from tests.decider.factories import producing, signal

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def fleet() -> list:
    return producing(3, NOW, gpu_model="RTX 5090") + producing(1, NOW, first_id=200, gpu_model="RTX 3090")


@pytest.mark.parametrize("busy_workers_pace", [186.0, 137.0])
def test_a_mixed_fleet_counts_each_producer_at_its_models_pace_whoever_was_busy_lately(
    busy_workers_pace: float,
) -> None:
    """demand's one per-worker figure averages the workers that had work (the oldest first when there is room),
    so it swings with who was busy; the fleet's pace is the same machines whatever it says."""
    measured = signal(NOW, throughput_per_h=busy_workers_pace).model_copy(
        update={"throughput_by_gpu_model_tasks_per_h": {"RTX 5090": 186.0, "RTX 3090": 80.0}}
    )
    assert throughput_per_machine(measured, fleet(), 120.0) == pytest.approx((3 * 186.0 + 80.0) / 4)


def test_a_model_not_measured_yet_counts_at_the_per_worker_figure() -> None:
    measured = signal(NOW, throughput_per_h=150.0).model_copy(
        update={"throughput_by_gpu_model_tasks_per_h": {"RTX 5090": 186.0}}
    )
    assert throughput_per_machine(measured, fleet(), 120.0) == pytest.approx((3 * 186.0 + 150.0) / 4)


def test_a_model_named_differently_by_the_worker_is_matched_through_the_catalog() -> None:
    measured = signal(NOW, throughput_per_h=150.0).model_copy(
        update={"throughput_by_gpu_model_tasks_per_h": {"rtx 5090": 180.0, "RTX_3090": 90.0}}
    )
    assert throughput_per_machine(measured, fleet(), 120.0) == pytest.approx((3 * 180.0 + 90.0) / 4)


def test_without_per_model_figures_the_per_worker_figure_stands() -> None:
    assert throughput_per_machine(signal(NOW, throughput_per_h=150.0), fleet(), 120.0) == 150.0
