"""Every state the provisioner writes goes through the one lifecycle (shared/lifecycle.py): vast's list and our
own commands move an instance only where vast's view of the table has an edge; anything else keeps its state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.js import JetStreamContext

from services.provisioner.reconcile import KnownInstance, Reconciliation, launch_label, reconcile
from services.provisioner.vast_models import VastInstance
from shared.clock import SimulatedClock
from shared.contract import FailureReason, InstanceState, ParkReason, RemovalReason, StopInstance
from shared.lifecycle import VAST_TRANSITIONS
from shared.settings import Settings
from tests.provisioner.service_harness import BusRecorder, market_scenario, running_provisioner, send
from tests.provisioner.test_service import launch
from tests.sim_vast.harness import StartVast

S = InstanceState
NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
LABEL = launch_label("k", 0)


def known(state: InstanceState, **fields: object) -> KnownInstance:
    return KnownInstance(instance_id=1, label=LABEL, idempotency_key="k", price_usd_per_h=0.5, state=state,
                         created_at=NOW, state_since=NOW, **fields)  # fmt: skip


def listed(actual: str | None, intended: str = "running", msg: str = "", is_bid: bool = False) -> VastInstance:
    return VastInstance(id=1, label=LABEL, actual_status=actual, intended_status=intended, status_msg=msg,
                        dph_total=0.5, is_bid=is_bid)  # fmt: skip


def relist(instance: KnownInstance, row: VastInstance, at: datetime = NOW) -> Reconciliation:
    return reconcile({1: instance}, [row], at, gone_after_missing_lists=2, unknown_price_usd_per_h=2.0)


def test_a_move_the_table_refuses_changes_nothing() -> None:
    gone = known(S.GONE, gone_because="destroyed (idle) by policy")
    assert gone.moved(S.RUNNING, NOW + timedelta(minutes=1)) is gone
    dead = known(S.FAILED, failure_reason=FailureReason.DEAD)
    assert dead.moved(S.RUNNING, NOW + timedelta(minutes=1), {"failure_reason": None}) is dead
    outbid = known(S.PARKED, park_reason=ParkReason.OUTBID)
    back = outbid.moved(S.RUNNING, NOW + timedelta(minutes=1), {"park_reason": None})
    assert (back.state, back.park_reason, back.state_since) == (S.RUNNING, None, NOW + timedelta(minutes=1))


def test_a_failed_machine_vast_lists_running_again_stays_failed_and_the_refusal_is_reported_once() -> None:
    dead = known(S.FAILED, failure_reason=FailureReason.DEAD, vast_actual_status="offline")
    back = relist(dead, listed("running"), NOW + timedelta(minutes=5))
    after = back.known[1]
    assert (after.state, after.failure_reason, after.state_since) == (S.FAILED, FailureReason.DEAD, NOW)
    assert after.vast_actual_status == "running"  # vast's word is kept on the record, only the state is not
    assert back.refused == [(1, S.FAILED, S.RUNNING)]
    assert back.incidents == []  # no new failure to remember
    assert relist(after, listed("running")).refused == []  # vast saying it again is no new refusal


def test_a_running_machine_listed_loading_again_stays_running() -> None:
    running = known(S.RUNNING, vast_actual_status="running")
    after = relist(running, listed("loading"))
    assert after.known[1].state is S.RUNNING and after.refused == [(1, S.RUNNING, S.LOADING)]


rows = st.one_of(
    st.none(),  # not in this list
    st.builds(
        listed,
        st.sampled_from([None, "created", "loading", "running", "stopped", "exited", "offline", "unknown"]),
        st.sampled_from(["running", "stopped"]),
        st.sampled_from(["", "Error: image pull failed"]),
        st.booleans(),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    first=st.sampled_from(list(VAST_TRANSITIONS)), stop=st.sampled_from([None, *RemovalReason]), lists=st.lists(rows)
)
def test_whatever_vast_lists_the_provisioner_only_takes_moves_of_the_lifecycle(
    first: InstanceState, stop: RemovalReason | None, lists: list[VastInstance | None]
) -> None:
    instance = known(first, stop_reason=stop, park_reason=ParkReason.STOPPED if first is S.PARKED else None)
    state, at = first, NOW
    for row in lists:
        at += timedelta(minutes=1)
        outcome = reconcile({1: instance}, [row] if row else [], at, gone_after_missing_lists=2,
                            unknown_price_usd_per_h=2.0)  # fmt: skip
        instance = outcome.known[1]
        assert instance.state is state or instance.state in VAST_TRANSITIONS[state], (state, instance.state, row)
        assert (instance.state_since == at) == (instance.state is not state)
        state = instance.state


async def test_a_stop_of_a_failed_machine_keeps_it_failed(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    """A stop that does not park winds a machine down (draining), but a failed one goes nowhere but gone: fleet
    would ignore the draining, so the provisioner keeps failed too, and counts the refusal."""
    _, url = await start_vast(market_scenario(fates={"exit_error": 1.0}))
    async with running_provisioner(settings, sim_clock, url) as service:
        await send(js, settings, "launch", launch("launch-failing", 1))
        [instance_id] = (await bus.result_for("launch-failing")).instance_ids
        sim_clock.advance(700)  # past its startup: the container exits with a docker error
        assert await service.operations.reconcile()
        stop = StopInstance(
            occurred_at=NOW, source="decider", idempotency_key="stop-failed", requested_by="policy",
            instance_id=instance_id, reason=RemovalReason.IDLE,
        )  # fmt: skip
        await send(js, settings, "stop", stop)
        stopped = await bus.result_for("stop-failed")
        assert await service.operations.reconcile()
        kept = service.operations.known[instance_id]
        registry = service.context.metrics.registry
        refused = registry.get_sample_value("fleetpilot_provisioner_refused_moves_total")
    assert stopped.outcome == "done"
    assert (kept.state, kept.failure_reason, kept.stop_reason) == (
        S.FAILED,
        FailureReason.VAST_ERROR,
        RemovalReason.IDLE,
    )
    states = [o.state for o in bus.observed_of(instance_id)]
    assert states[:2] == [S.REQUESTED, S.FAILED] and set(states[2:]) <= {S.FAILED}, states
    assert refused is not None and refused >= 1
