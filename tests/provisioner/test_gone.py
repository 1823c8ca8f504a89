"""A machine the provisioner destroyed becomes `gone` in fleet with the reason, whatever order the words arrive in.

Ghost machines: fleet showed destroyed machines `failed` while every later destroy was answered "already gone"
and nothing told fleet again. Now that answer says the gone state again, with what removed the machine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nats.js import JetStreamContext

from services.fleet.config import FleetSettings
from services.fleet.core import FleetCore
from services.provisioner.reconcile import KnownInstance, launch_label, reconcile
from services.provisioner.vast_models import VastInstance
from shared.clock import SimulatedClock
from shared.contract import DestroyInstance, FailureReason, InstanceObserved, InstanceState, RemovalReason
from shared.settings import Settings
from sim.vast.scenario import Endpoint
from tests.provisioner.service_harness import BusRecorder, market_scenario, running_provisioner, send
from tests.provisioner.test_service import launch
from tests.sim_vast.harness import StartVast

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def destroy(key: str, instance_id: int) -> DestroyInstance:
    return DestroyInstance(
        occurred_at=NOW, source="decider", idempotency_key=key, requested_by="policy", instance_id=instance_id,
        reason=RemovalReason.FAILED,
    )  # fmt: skip


async def test_a_second_destroy_of_a_gone_machine_says_gone_again_with_what_removed_it(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-g", 1))
        [instance_id] = (await bus.result_for("launch-g")).instance_ids
        await send(js, settings, "destroy", destroy("run-0001-0", instance_id))
        assert (await bus.result_for("run-0001-0")).outcome == "done"
        # a later run, from a fleet that never heard the first gone, orders it again under a new key
        await send(js, settings, "destroy", destroy("run-0002-0", instance_id))
        again = await bus.result_for("run-0002-0")
    assert again.outcome == "done" and "already gone (destroyed (failed) by policy, key run-0001-0)" in again.detail
    gones = [o for o in bus.observed_of(instance_id) if o.state is InstanceState.GONE]
    assert len(gones) == 2, "the answer repeats the gone observation for a fleet that missed it"
    assert all(o.gone_because == "destroyed (failed) by policy, key run-0001-0" for o in gones)
    assert len(simulator.calls_to(Endpoint.DESTROY)) == 1  # vast was asked once


def test_fleet_that_missed_the_first_gone_takes_the_repeated_one_and_records_why() -> None:
    core = FleetCore(FleetSettings())
    first = InstanceObserved(occurred_at=NOW, source="provisioner", instance_id=7, state=InstanceState.RUNNING,
                             price_usd_per_h=0.5)  # fmt: skip
    core.observe_instance(first, NOW)
    failed = first.model_copy(update={"state": InstanceState.FAILED, "failure_reason": FailureReason.VAST_ERROR})
    core.observe_instance(failed, NOW + timedelta(minutes=1))
    gone = first.model_copy(
        update={"state": InstanceState.GONE, "gone_because": "destroyed (failed) by policy, key run-0001-0"}
    )
    # the repeated gone, dated later; a delayed older failed observation arrives after it and changes nothing
    [transition] = core.observe_instance(gone.model_copy(update={"occurred_at": NOW + timedelta(hours=2)}), NOW)
    assert transition.to_state is InstanceState.GONE and "key run-0001-0" in transition.detail
    assert core.observe_instance(failed, NOW + timedelta(hours=3)) == []
    assert core.instances[7].state is InstanceState.GONE


def test_a_destroyed_machine_vast_still_lists_stays_gone_and_is_counted_for_a_second_destroy() -> None:
    label = launch_label("k", 0)
    gone = KnownInstance(
        instance_id=1, label=label, idempotency_key="k", price_usd_per_h=0.5, state=InstanceState.GONE,
        created_at=NOW, state_since=NOW, gone_because="destroyed (idle) by policy, key run-0001-0",
    )  # fmt: skip
    row = VastInstance(id=1, label=label, actual_status="running", intended_status="running", dph_total=0.5)
    known = {1: gone}
    for lists in (1, 2, 3):
        outcome = reconcile(known, [row], NOW, gone_after_missing_lists=3, unknown_price_usd_per_h=2.0)
        known = outcome.known
        assert known[1].state is InstanceState.GONE and known[1].listed_after_gone == lists
        assert outcome.to_publish == []  # never revived into running, which fleet would ignore while it bills
