"""fleet's pure core around a kept disk: parked by us or by an outbid, resumed, back to producing or failed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from services.fleet.config import FleetSettings
from services.fleet.core import FleetCore
from services.fleet.saved import SavedMeta, meta_of, restored_core, restored_instance, take_changes
from shared.contract import FailureReason, FleetSnapshot, InstanceState, ParkReason, TriggerReason
from tests.fleet.test_core import ID, T0, observed, producing, queue, task

S = InstanceState
STORAGE_USD_PER_H = 0.02


def parked(core: FleetCore, at: datetime, reason: ParkReason = ParkReason.STOPPED, instance_id: int = ID) -> datetime:
    """A producing machine, then parked as the provisioner reports it; returns when it was parked."""
    done = producing(core, at, instance_id)
    parked_at = done + timedelta(minutes=30)
    core.observe_instance(
        observed(
            S.PARKED,
            parked_at,
            instance_id,
            vast_actual_status="stopped",
            park_reason=reason,
            storage_usd_per_h=STORAGE_USD_PER_H,
        ),
        parked_at,
    )
    return parked_at


def test_a_parked_machine_is_never_dead_and_commits_its_storage_only() -> None:
    core = FleetCore()
    parked_at = parked(core, T0)
    producing(core, T0, 2)  # a second machine, at full price
    record = core.instances[ID]
    assert (record.state, record.park_reason) == (S.PARKED, ParkReason.STOPPED)
    # tasks wait for hours: a producer silent that long would be dead, a parked one is only parked
    for hours in range(1, 12):
        now = parked_at + timedelta(hours=hours)
        core.observe_queue(queue(40, now), now)
        core.check(now)
    assert core.instances[ID].state is S.PARKED
    snapshot = core.snapshot(parked_at + timedelta(hours=12))
    assert snapshot.counts_by_state[S.PARKED] == 1
    assert snapshot.spend_usd_per_h == pytest.approx(0.5 + STORAGE_USD_PER_H)
    line = next(line for line in snapshot.instances if line.instance_id == ID)
    assert (line.price_usd_per_h, line.committed_usd_per_h) == (0.5, STORAGE_USD_PER_H)
    assert "parked(stopped) $0.02/h storage ($0.50/h resumed)" in line.line
    assert "[vast:" not in line.line  # stopped is what parked means
    assert FleetSnapshot.model_validate_json(snapshot.model_dump_json()) == snapshot


def test_a_resumed_machine_produces_again_on_its_next_task_without_a_new_benchmark() -> None:
    core = FleetCore()
    parked_at = parked(core, T0)
    start = parked_at + timedelta(hours=3)
    moves = core.observe_instance(observed(S.RESUMING, start, vast_actual_status="stopped"), start)
    assert [(m.from_state, m.to_state) for m in moves] == [(S.PARKED, S.RESUMING)]
    assert core.snapshot(start).spend_usd_per_h == pytest.approx(0.5)  # its full price again
    running = start + timedelta(minutes=2)
    assert core.observe_instance(observed(S.RUNNING, running), running) == []  # vast runs it; the worker decides
    started = running + timedelta(minutes=1)
    assert core.observe_task(task("started", started), started) == []
    done = running + timedelta(minutes=5)
    moves = core.observe_task(task("completed", done), done)
    assert [(m.from_state, m.to_state, m.visit) for m in moves] == [(S.RESUMING, S.PRODUCING, 2)]
    assert core.instances[ID].producing_since_s == done.timestamp()
    # its startup stays what it was: the first time it produced, not this return a night after its creation
    first = core.instances[ID].first_producing_s
    assert first is not None and first < parked_at.timestamp()
    line = next(line for line in core.snapshot(done).instances if line.instance_id == ID)
    assert line.first_producing_at is not None and line.first_producing_at.timestamp() == first
    entered = [(e.from_state, e.to_state) for e in core.instances[ID].history if e.applied]
    assert entered[-3:] == [(S.PRODUCING, S.PARKED), (S.PARKED, S.RESUMING), (S.RESUMING, S.PRODUCING)]


def test_a_machine_parked_once_loaded_counts_its_wait_parked_apart_from_its_startup() -> None:
    """Running (loaded) at T0 + 90 min, parked 10 minutes later, resumed 5 h after that, producing 12 minutes
    on: its line says it was parked 5 h before it first produced, so its startup reads 1 h 52 min, not 6 h 52."""
    core = FleetCore()
    core.observe_instance(observed(S.LOADING, T0), T0)
    running = T0 + timedelta(minutes=90)
    core.observe_instance(observed(S.RUNNING, running), running)
    stopped = running + timedelta(minutes=10)
    core.observe_instance(observed(S.PARKED, stopped, vast_actual_status="stopped", park_reason=ParkReason.STOPPED),
                          stopped)  # fmt: skip
    start = stopped + timedelta(hours=5)
    core.observe_instance(observed(S.RESUMING, start, vast_actual_status="stopped"), start)
    done = start + timedelta(minutes=12)
    core.observe_task(task("completed", done), done)
    record = core.instances[ID]
    assert record.state is S.PRODUCING and record.parked_before_producing_s == 5 * 3600
    line = next(line for line in core.snapshot(done).instances if line.instance_id == ID)
    assert line.first_producing_at is not None and line.parked_before_producing_s == 5 * 3600
    startup_s = (line.first_producing_at - line.created_at).total_seconds() - line.parked_before_producing_s
    assert startup_s == (90 + 10 + 12) * 60
    # parked again after it produced: the startup it read stays
    later = done + timedelta(hours=1)
    core.observe_instance(observed(S.PARKED, later, vast_actual_status="stopped", park_reason=ParkReason.STOPPED),
                          later)  # fmt: skip
    again = later + timedelta(hours=8)
    core.observe_instance(observed(S.RESUMING, again, vast_actual_status="stopped"), again)
    assert core.instances[ID].parked_before_producing_s == 5 * 3600
    # and it is saved with the record
    assert restored_instance(json.loads(json.dumps(take_changes(core)[0][0]))).parked_before_producing_s == 5 * 3600


def test_a_machine_parked_before_its_benchmark_is_benchmarked_when_it_comes_back() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.RUNNING, T0), T0)
    later = T0 + timedelta(minutes=10)
    core.observe_instance(observed(S.PARKED, later, vast_actual_status="stopped", park_reason=ParkReason.OUTBID), later)
    back = later + timedelta(hours=1)
    core.observe_instance(observed(S.RUNNING, back), back)  # vast resumed the outbid bid by itself
    assert core.instances[ID].state is S.RESUMING
    spoke = back + timedelta(minutes=3)
    moves = core.observe_task(task("completed", spoke), spoke)
    assert [m.to_state for m in moves] == [S.REGISTERED, S.PRODUCING]  # as before: registered first


def test_a_resume_waiting_for_its_gpu_fails_as_gpu_taken_at_the_limit_and_not_before() -> None:
    config = FleetSettings(resume_wait_s=1800)
    core = FleetCore(config)
    start = parked(core, T0) + timedelta(hours=1)
    core.observe_instance(observed(S.RESUMING, start, vast_actual_status="stopped"), start)
    assert core.check(start + timedelta(seconds=1799)).transitions == []
    [failed] = core.check(start + timedelta(seconds=1800)).transitions
    assert (failed.from_state, failed.to_state, failed.failure_reason) == (
        S.RESUMING,
        S.FAILED,
        FailureReason.GPU_TAKEN,
    )
    assert "30 min" in failed.detail


def test_a_resume_whose_machine_runs_is_not_taken_for_a_lost_gpu() -> None:
    core = FleetCore(FleetSettings(resume_wait_s=1800))
    start = parked(core, T0) + timedelta(hours=1)
    core.observe_instance(observed(S.RESUMING, start, vast_actual_status="stopped"), start)
    running = start + timedelta(minutes=5)
    core.observe_instance(observed(S.RUNNING, running), running)
    assert core.check(start + timedelta(hours=2)).transitions == []  # nothing queued: idle, not failed
    assert core.instances[ID].state is S.RESUMING


def test_an_outbid_machine_commits_its_price_and_says_why_it_is_parked() -> None:
    core = FleetCore()
    parked_at = parked(core, T0, ParkReason.OUTBID)
    snapshot = core.snapshot(parked_at)
    assert snapshot.spend_usd_per_h == pytest.approx(0.5)  # vast may resume it at any moment
    assert "parked(outbid) $0.50/h" in snapshot.instances[0].line


def test_a_parked_machine_and_its_reason_survive_a_restart() -> None:
    core = FleetCore()
    parked(core, T0)
    saved, _ = take_changes(core)
    # records saved before parking existed have neither field: they read as not parked
    older = {k: v for k, v in saved[0].items() if k not in ("park_reason", "storage_usd_per_h")}
    assert restored_instance(older).park_reason is None
    restored = restored_core(json.loads(json.dumps(saved)), meta_of(core), T0 + timedelta(hours=3))
    record = restored.instances[ID]
    assert (record.state, record.park_reason, record.storage_usd_per_h) == (
        S.PARKED,
        ParkReason.STOPPED,
        STORAGE_USD_PER_H,
    )


def test_a_late_parked_report_for_a_failed_machine_changes_nothing_it_shows() -> None:
    core = FleetCore()
    core.observe_instance(observed(S.FAILED, T0, failure_reason=FailureReason.DEAD), T0)
    later = T0 + timedelta(minutes=5)
    core.observe_instance(observed(S.PARKED, later, vast_actual_status="stopped", park_reason=ParkReason.OUTBID), later)
    record = core.instances[ID]
    assert (record.state, record.park_reason) == (S.FAILED, None)
    assert "outbid" not in core.snapshot(later).instances[0].line


@pytest.mark.parametrize(
    ("park_reason", "trigger"),
    [
        (ParkReason.OUTBID, ("p0", TriggerReason.INSTANCE_FAILED)),  # capacity lost unplanned
        (ParkReason.STOPPED, ("p1", TriggerReason.INSTANCE_TRANSITION)),  # our own park
    ],
)
def test_the_core_returns_each_park_with_the_trigger_fleet_publishes(
    park_reason: ParkReason, trigger: tuple[str, TriggerReason]
) -> None:
    core = FleetCore(FleetSettings())
    at = producing(core, T0) + timedelta(minutes=30)
    report = observed(S.PARKED, at, vast_actual_status="stopped", park_reason=park_reason)
    [transition] = core.observe_instance(report, at)
    assert (transition.trigger_priority, transition.trigger_reason) == trigger


def test_how_each_park_ended_is_booked_and_carried_by_the_snapshot_and_a_restart() -> None:
    """Resumed (the start produced again), its GPU taken (fleet failed the start), given back while parked: the
    hours each had waited, over the window; an outbid pause is the market's and is not booked here."""
    core = FleetCore(FleetSettings(resume_wait_s=1800))
    assert core.snapshot(T0).park_outcomes is None  # no park ended yet: the decider keeps its priors
    # 1: parked, resumed 3 h later, produces again
    parked_at = parked(core, T0, instance_id=1)
    start = parked_at + timedelta(hours=3)
    core.observe_instance(observed(S.RESUMING, start, 1, vast_actual_status="stopped"), start)
    done = start + timedelta(minutes=5)
    core.observe_instance(observed(S.RUNNING, done - timedelta(minutes=3), 1), done - timedelta(minutes=3))
    core.observe_task(task("completed", done, 1), done)
    # 2: parked, resumed 5 h later, its GPU taken: failed at the resume wait
    parked_at_2 = parked(core, T0, instance_id=2)
    start_2 = parked_at_2 + timedelta(hours=5)
    core.observe_instance(observed(S.RESUMING, start_2, 2, vast_actual_status="stopped"), start_2)
    core.check(start_2 + timedelta(seconds=1800))
    # 3: parked and given back 8 h later without a resume; 4: outbid and back by itself (not ours)
    parked_at_3 = parked(core, T0, instance_id=3)
    gone = parked_at_3 + timedelta(hours=8)
    core.observe_instance(observed(S.GONE, gone, 3), gone)
    parked(core, T0, ParkReason.OUTBID, instance_id=4)
    core.observe_instance(observed(S.RUNNING, gone, 4), gone)

    outcomes = core.snapshot(gone).park_outcomes
    assert outcomes is not None
    assert outcomes.resumed_after_h == [pytest.approx(3.0)]
    assert outcomes.taken_after_h == [pytest.approx(5.0)]
    assert outcomes.given_back_after_h == [pytest.approx(8.0)]
    restored = restored_core([], SavedMeta.model_validate_json(meta_of(core).model_dump_json()), gone)
    assert restored.snapshot(gone).park_outcomes == outcomes
    # past the window the history is forgotten
    assert core.snapshot(gone + timedelta(seconds=FleetSettings().park_window_s + 1)).park_outcomes is None
