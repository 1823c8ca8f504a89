"""fleet's time limits and triggers, and the property that whatever arrives, in whatever order, no instance moves
backwards except around the one loop a kept disk allows (parked → resuming → back to work)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from services.fleet.config import FleetSettings
from services.fleet.core import FleetCore
from services.fleet.lifecycle import TIME_LIMITS, first_limit_s, time_limit, trigger_for
from shared.contract import (
    BenchResult,
    DrainInstance,
    FailureReason,
    InstanceObserved,
    InstanceState,
    ParkReason,
    QueueDepth,
    QueueSnapshot,
    RemovalReason,
    TaskEvent,
    TriggerReason,
)
from shared.lifecycle import ORDER, RESUME_EDGES, allowed

S = InstanceState
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def test_an_outbid_pause_wakes_the_decider_now_and_our_own_park_does_not() -> None:
    outbid = trigger_for(S.PRODUCING, S.PARKED, None, ParkReason.OUTBID)
    assert outbid == ("p0", TriggerReason.INSTANCE_FAILED)
    assert trigger_for(S.DRAINING, S.PARKED, None, ParkReason.STOPPED) == ("p1", TriggerReason.INSTANCE_TRANSITION)
    assert trigger_for(S.RESUMING, S.FAILED, FailureReason.GPU_TAKEN) == ("p0", TriggerReason.INSTANCE_FAILED)
    assert trigger_for(S.PARKED, S.GONE, None) == ("p1", TriggerReason.INSTANCE_TRANSITION)


def test_every_time_limit_fails_into_an_edge_of_the_table_and_the_first_deadline_is_the_shortest() -> None:
    for (state, _), limit in TIME_LIMITS.items():
        assert limit.reason is None or allowed(state, S.FAILED), state
        assert (limit.reason is None) == (state is S.GONE), state  # only a gone instance's limit forgets it
    config = FleetSettings(resume_wait_s=600, stuck_loading_s=7200, never_registered_s=1800)
    assert first_limit_s(S.RESUMING, config) == 600
    assert first_limit_s(S.PARKED, config) is None  # a kept machine is never stuck nor dead
    assert time_limit(S.RESUMING, "Scheduling") is TIME_LIMITS[(S.RESUMING, "stopped")]  # still waits for its GPU
    assert time_limit(S.RESUMING, "running") is TIME_LIMITS[(S.RESUMING, "running")]


def test_triggers_wake_the_decider_now_only_when_capacity_appears_or_vanishes_unplanned() -> None:
    assert trigger_for(S.LOADING, S.RUNNING, None) == ("p0", TriggerReason.INSTANCE_RUNNING)
    assert trigger_for(S.PRODUCING, S.FAILED, FailureReason.DEAD) == ("p0", TriggerReason.INSTANCE_DEAD)
    assert trigger_for(S.LOADING, S.FAILED, FailureReason.STUCK_LOADING) == ("p0", TriggerReason.INSTANCE_FAILED)
    assert trigger_for(S.PRODUCING, S.GONE, None) == ("p0", TriggerReason.INSTANCE_FAILED)  # killed
    assert trigger_for(S.DRAINING, S.GONE, None) == ("p1", TriggerReason.INSTANCE_TRANSITION)
    assert trigger_for(S.BENCHMARKED, S.PRODUCING, None) == ("p1", TriggerReason.INSTANCE_TRANSITION)
    # our own scale-down destroyed it: planned, no instance failure
    assert trigger_for(S.RUNNING, S.GONE, None, planned=True) == ("p1", TriggerReason.INSTANCE_TRANSITION)


def test_a_machine_our_destroy_removed_wakes_the_decider_at_p1_and_one_vast_lost_at_p0() -> None:
    from datetime import UTC, datetime

    from services.fleet.config import FleetSettings
    from services.fleet.core import FleetCore
    from shared.contract import InstanceObserved, RemovalReason

    now = datetime(2026, 3, 2, tzinfo=UTC)
    core = FleetCore(FleetSettings())
    for instance_id in (1, 2):
        core.observe_instance(InstanceObserved(occurred_at=now, source="provisioner", instance_id=instance_id,
                                               state=S.RUNNING, price_usd_per_h=0.5), now)  # fmt: skip
    ours = InstanceObserved(occurred_at=now, source="provisioner", instance_id=1, state=S.GONE, price_usd_per_h=0.5,
                            removal_reason=RemovalReason.OVER_PROVISIONED)  # fmt: skip
    lost = ours.model_copy(update={"instance_id": 2, "removal_reason": None})
    [scaled_down] = core.observe_instance(ours, now)
    [vanished] = core.observe_instance(lost, now)
    assert (scaled_down.trigger_priority, scaled_down.trigger_reason) == ("p1", TriggerReason.INSTANCE_TRANSITION)
    assert (vanished.trigger_priority, vanished.trigger_reason) == ("p0", TriggerReason.INSTANCE_FAILED)


observed_states = st.sampled_from([S.REQUESTED, S.LOADING, S.RUNNING, S.PARKED, S.RESUMING, S.FAILED, S.GONE])
inputs = st.lists(
    st.one_of(
        st.tuples(st.just("observed"), st.integers(1, 3), observed_states),
        st.tuples(st.just("task"), st.integers(1, 3), st.sampled_from(["started", "completed"])),
        st.tuples(st.just("bench"), st.integers(1, 3), st.sampled_from(["pass", "degraded", "fail"])),
        st.tuples(st.just("drain"), st.integers(1, 3), st.just("")),
        st.tuples(st.just("queue"), st.integers(0, 40), st.just("")),
        st.tuples(st.just("check"), st.integers(0, 0), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(inputs, st.lists(st.integers(0, 4000), min_size=40, max_size=40))
def test_no_instance_ever_moves_backwards_and_counts_stay_true(
    steps: list[tuple[str, int, object]], gaps_s: list[int]
) -> None:
    core = FleetCore()
    now = T0
    for n, ((kind, number, value), gap_s) in enumerate(zip(steps, gaps_s, strict=False)):
        now += timedelta(seconds=gap_s)
        # events may be dated before `now`, as late deliveries are
        at = now - timedelta(seconds=(gap_s * 7) % 900)
        if kind == "observed":
            state = S(str(value))
            core.observe_instance(
                InstanceObserved(
                    occurred_at=at,
                    source="provisioner",
                    instance_id=number,
                    state=state,
                    failure_reason=FailureReason.VAST_ERROR if state == S.FAILED else None,
                    price_usd_per_h=0.5,
                ),
                now,
            )
        elif kind == "task":
            core.observe_task(
                TaskEvent(
                    occurred_at=at,
                    source="jobs",
                    kind=str(value),  # type: ignore[arg-type]
                    task_id=f"t{n}",
                    worker_id=f"w{number}",
                    instance_id=number,
                ),
                now,
            )
        elif kind == "bench":
            core.observe_bench(
                BenchResult(
                    occurred_at=at,
                    source="bench",
                    instance_id=number,
                    kind="gpu",
                    device="cpu",
                    verdict=str(value),  # type: ignore[arg-type]
                ),
                now,
            )
        elif kind == "drain":
            core.drain(
                DrainInstance(
                    occurred_at=at,
                    source="decider",
                    idempotency_key=f"drain-{n:04d}",
                    requested_by="policy",
                    instance_id=number,
                    reason=RemovalReason.IDLE,
                ),
                now,
            )
        elif kind == "queue":
            core.observe_queue(
                QueueSnapshot(
                    occurred_at=at, source="jobs", queues=[QueueDepth(task_type="t", pending=number, running=0)]
                ),
                now,
            )
        else:
            core.check(now)

    for record in core.instances.values():
        applied = [entry for entry in record.history if entry.applied]
        for entry in applied[1:]:
            assert entry.from_state is not None
            climbs = ORDER[entry.to_state] > ORDER[entry.from_state]
            assert climbs or (entry.from_state, entry.to_state) in RESUME_EDGES, record.history
        # failed and gone are final: once entered, nothing but gone follows
        final = [n for n, entry in enumerate(applied) if entry.to_state in (S.FAILED, S.GONE)]
        if final:
            assert all(entry.to_state in (S.FAILED, S.GONE) for entry in applied[final[0] :]), record.history
        times = [entry.at_s for entry in applied]
        assert times == sorted(times)
        assert applied[-1].to_state == record.state
    recount = {state: 0 for state in InstanceState}
    for record in core.instances.values():
        if record.state != S.GONE:
            recount[record.state] += 1
    assert {s: n for s, n in core.counts.items() if s != S.GONE} == {s: n for s, n in recount.items() if s != S.GONE}
