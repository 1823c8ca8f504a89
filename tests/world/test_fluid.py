"""The fluid queue: FIFO waits in closed form between events, conservation of tasks, exact delay charges."""

from __future__ import annotations

import pytest

from sim.world.fluid import FluidQueue
from sim.world.objective import ObjectiveConfig, WaitStats, mean_excess_s


def queue(grace_s: float = 0.0) -> FluidQueue:
    return FluidQueue(WaitStats(grace_s))


def test_arrivals_faster_than_service_wait_in_a_line() -> None:
    q = queue()
    q.advance(0, 60, 1.0, 0.5)  # task x arrives at x s and starts at 2x s
    assert q.count == pytest.approx(30)
    assert q.started == pytest.approx(30)
    q.advance(60, 120, 0.0, 0.5)
    assert q.count == pytest.approx(0)
    assert q.waits.max_wait_s == pytest.approx(60)
    assert q.waits.excess_task_s == pytest.approx(60 * 30)  # mean wait 30 s over 60 tasks
    assert q.waits.percentile_s(0.5) == pytest.approx(30, abs=0.01)


def test_spare_capacity_starts_every_task_at_once() -> None:
    q = queue()
    q.advance(0, 600, 0.2, 1.0)
    assert q.count == 0
    assert q.started == pytest.approx(120)
    assert q.waits.max_wait_s == 0
    assert q.waits.zero_wait_tasks == pytest.approx(120)


def test_a_backlog_is_caught_up_inside_an_interval() -> None:
    q = queue()
    q.advance(0, 10, 1.0, 0.0)  # 10 tasks queue with nobody serving
    pieces = q.advance(10, 100, 1.0, 2.0)  # the backlog drains at net 1/s: empty at t=20
    assert q.count == 0
    assert q.last_empty_at_s == pytest.approx(20)
    assert [(p.start_s, p.end_s, p.rate_per_s) for p in pieces] == [(10, 20, 2.0), (20, 100, 1.0)]
    assert q.waits.max_wait_s == pytest.approx(10)  # the first task waited from 0 to 10
    assert q.arrived == pytest.approx(q.started)


@pytest.mark.parametrize(("arrival", "service"), [(0.5, 0.3), (1.0, 1.0), (0.1, 2.0), (3.0, 0.0)])
def test_tasks_are_conserved(arrival: float, service: float) -> None:
    q = queue()
    t = 0.0
    for dt in (7.0, 60.0, 0.5, 300.0):
        q.advance(t, t + dt, arrival, service)
        t += dt
        assert q.arrived == pytest.approx(q.started + q.count)
    assert q.waits.tasks == pytest.approx(q.started)


def test_unserved_tasks_are_charged_their_wait_so_far() -> None:
    q = queue(grace_s=100.0)
    q.advance(0, 60, 1.0, 0.0)
    assert q.charge_unserved(1000.0) == pytest.approx(60)
    # waits run from 1000 (first arrival) to 940 (last): all beyond the 100 s grace
    assert q.waits.excess_task_s == pytest.approx(60 * (970 - 100))


@pytest.mark.parametrize(
    ("lo", "hi", "grace", "expected"),
    [(0, 10, 20, 0.0), (30, 50, 20, 20.0), (0, 40, 20, 5.0), (40, 0, 20, 5.0), (25, 25, 20, 5.0)],
)
def test_mean_excess_over_a_linear_run(lo: float, hi: float, grace: float, expected: float) -> None:
    assert mean_excess_s(lo, hi, grace) == pytest.approx(expected)


def test_objective_defaults_and_validation() -> None:
    objective = ObjectiveConfig()
    assert objective.grace_s == 15 * 60
    assert objective.delay_usd_per_task_h == 0.10
    with pytest.raises(ValueError, match="grace_min"):
        ObjectiveConfig(grace_min=-1)
