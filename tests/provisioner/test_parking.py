"""Parked and resuming machines end to end: the provisioner and fleet on real NATS and Redis, vast.ai simulated
over real HTTP. A park keeps the disk and bills storage only, a resume brings the machine back, a GPU rented
meanwhile ends the resume as failed (gpu_taken), and an outbid bid is tracked parked and back."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from services.decider.decision import policy_actions
from services.decider.policy import PolicyConfig, recommend
from services.provisioner.app import ProvisionerService
from shared.clock import SimulatedClock
from shared.contract import (
    DestroyInstance,
    FailureReason,
    InstanceLine,
    InstanceState,
    InstanceTransitioned,
    LaunchInstances,
    LaunchReason,
    ParkReason,
    RefusalRule,
    RemovalReason,
    ResumeInstance,
    StopInstance,
    TriggerReason,
)
from shared.settings import Settings
from sim.vast.scenario import Endpoint, Scenario
from sim.vast.server import VastSimulator
from sim.vast.world import CreateRequest
from tests.decider.factories import signal
from tests.fleet.test_app import Bus as FleetBus
from tests.fleet.test_app import running_fleet
from tests.helpers import eventually
from tests.provisioner.service_harness import NOW, OFFER_A, BusRecorder, market_scenario, running_provisioner, send
from tests.sim_vast.harness import StartVast

S = InstanceState
# $3.65 per GB and month on the 20 GB each instance rents: $0.10/h of storage, billed whether it runs or not
STORAGE = {"billing": {"storage_usd_per_gb_month": 3.65}}
STORAGE_USD_PER_H = 3.65 * 20 / 730
STARTUP_S = 600  # the market scenario's first start
RESTART_S = 120  # the simulator's start of a kept disk
COMMON = {"occurred_at": NOW, "source": "decider", "requested_by": "policy"}


@dataclass(frozen=True)
class Rig:
    """A test's real servers and the simulator's starter: what the provisioner and fleet run on."""

    settings: Settings
    js: JetStreamContext
    bus: BusRecorder  # what the provisioner publishes
    fleet: FleetBus  # what fleet is told and answers
    clock: SimulatedClock
    start_vast: StartVast


@pytest.fixture
def rig(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
) -> Rig:
    return Rig(settings, js, bus, FleetBus(js, nc, settings, sim_clock), sim_clock, start_vast)


def park(key: str, instance_id: int) -> StopInstance:
    return StopInstance(**COMMON, idempotency_key=key, instance_id=instance_id, reason=RemovalReason.PARK)


def resume(key: str, instance_id: int) -> ResumeInstance:
    return ResumeInstance(
        **COMMON,
        idempotency_key=key,
        instance_id=instance_id,
        reason=LaunchReason.SUSTAINED_DEMAND,
    )


def launch(key: str) -> LaunchInstances:
    return LaunchInstances(
        **COMMON,
        idempotency_key=key,
        count=1,
        launch_priority="normal",
        reason=LaunchReason.BACKLOG,
    )


@contextlib.asynccontextmanager
async def fleet_and_provisioner(
    settings: Settings, clock: SimulatedClock, url: str, budget_usd_per_h: float | None = None
) -> AsyncIterator[ProvisionerService]:
    if budget_usd_per_h is not None:
        settings = settings.model_copy(update={"budget_usd_per_h": budget_usd_per_h})
    async with running_fleet(settings, clock), running_provisioner(settings, clock, url) as service:
        yield service


async def line_of(fleet: FleetBus, instance_id: int, state: InstanceState, *, ticking: bool = False) -> InstanceLine:
    """The instance's line once it is in `state`; `ticking`: fleet's timer runs between looks (time in state)."""

    async def found() -> InstanceLine | None:
        if ticking:
            await fleet.clock.advance_and_settle(5)
        lines = [line for line in (await fleet.ask_snapshot()).instances if line.instance_id == instance_id]
        return lines[0] if lines and lines[0].state is state else None

    line: InstanceLine = await eventually(found, interval_s=0.1)
    return line


async def producing_machine(
    service: ProvisionerService, fleet: FleetBus, bus: BusRecorder, js: JetStreamContext, settings: Settings
) -> int:
    """One machine launched, running on vast and producing in fleet."""
    await send(js, settings, "launch", launch("launch-park"))
    [instance_id] = (await bus.result_for("launch-park")).instance_ids
    fleet.clock.advance(STARTUP_S + 60)
    assert await service.operations.reconcile()
    await line_of(fleet, instance_id, S.RUNNING)
    await fleet.task(instance_id, "completed", "task-1")
    await line_of(fleet, instance_id, S.PRODUCING)
    return instance_id


def costs(simulator: VastSimulator, instance_id: int, clock: SimulatedClock) -> tuple[float, float]:
    entry = next(e for e in simulator.world.ledger(clock.now()).entries if e.instance_id == instance_id)
    assert entry.destroyed_at is None
    return entry.gpu_cost_usd, entry.storage_cost_usd


async def test_a_park_keeps_the_machine_for_storage_only_and_a_resume_brings_it_back_producing(rig: Rig) -> None:
    settings, js, bus, fleet, sim_clock = rig.settings, rig.js, rig.bus, rig.fleet, rig.clock
    simulator, url = await rig.start_vast(market_scenario(**STORAGE))
    async with fleet_and_provisioner(settings, sim_clock, url) as service:
        instance_id = await producing_machine(service, fleet, bus, js, settings)
        await send(js, settings, "stop", park("park-0001", instance_id))
        parked = await bus.result_for("park-0001")
        assert parked.outcome == "done" and "parked" in parked.detail
        line = await line_of(fleet, instance_id, S.PARKED)
        assert line.park_reason is ParkReason.STOPPED
        assert line.committed_usd_per_h == pytest.approx(STORAGE_USD_PER_H)
        snapshot = await fleet.ask_snapshot()
        assert snapshot.spend_usd_per_h == pytest.approx(STORAGE_USD_PER_H)
        assert service.operations.commitment().usd_per_h == pytest.approx(STORAGE_USD_PER_H)

        # an hour parked: vast keeps it (listed, never gone) and bills its disk alone
        gpu_before, storage_before = costs(simulator, instance_id, sim_clock)
        sim_clock.advance(3600)
        for _ in range(3):  # more lists than it takes to call a missing instance gone
            assert await service.operations.reconcile()
        gpu_after, storage_after = costs(simulator, instance_id, sim_clock)
        assert gpu_after == pytest.approx(gpu_before)
        assert storage_after - storage_before == pytest.approx(STORAGE_USD_PER_H, rel=1e-3)
        assert simulator.calls_to(Endpoint.DESTROY) == []
        assert (await line_of(fleet, instance_id, S.PARKED)).park_reason is ParkReason.STOPPED

        await send(js, settings, "resume", resume("resume-0001", instance_id))
        resumed = await bus.result_for("resume-0001")
        assert (resumed.outcome, resumed.command, resumed.instance_ids) == ("done", "resume", [instance_id])
        await line_of(fleet, instance_id, S.RESUMING)
        sim_clock.advance(RESTART_S + 30)
        assert await service.operations.reconcile()
        await eventually(lambda: bus.observed_of(instance_id)[-1].state is S.RUNNING)
        await fleet.task(instance_id, "completed", "task-2")
        back = await line_of(fleet, instance_id, S.PRODUCING)

        async def produced_again() -> InstanceTransitioned | None:
            latest = await fleet.transition(S.PRODUCING)
            return latest if latest is not None and latest.from_state is S.RESUMING else None

        # the second entry into producing is its own event, not taken for a re-publish of the first
        again = await eventually(produced_again)
    assert back.committed_usd_per_h == back.price_usd_per_h
    assert again.instance_id == instance_id
    states = [o.state for o in bus.observed_of(instance_id)]
    assert S.GONE not in states and S.DRAINING not in states
    assert simulator.world.instances[instance_id].request.image is not None
    assert len(simulator.calls_to(Endpoint.CREATE)) == 1  # the same machine, not a new rent


async def test_a_resume_on_a_gpu_taken_meanwhile_fails_as_gpu_taken_so_it_can_be_replaced(rig: Rig) -> None:
    settings, js, bus, fleet, sim_clock = rig.settings, rig.js, rig.bus, rig.fleet, rig.clock
    taken = {"gpu_taken_per_stopped_h": 1000, "gpu_free_after_s": None}  # rented for good while it was parked
    simulator, url = await rig.start_vast(market_scenario(**STORAGE, stop_start=taken))
    async with fleet_and_provisioner(settings, sim_clock, url) as service:
        instance_id = await producing_machine(service, fleet, bus, js, settings)
        await send(js, settings, "stop", park("park-0002", instance_id))
        await line_of(fleet, instance_id, S.PARKED)
        sim_clock.advance(3600)
        await send(js, settings, "resume", resume("resume-0002", instance_id))
        assert (await bus.result_for("resume-0002")).outcome == "done"  # vast accepts; the start then waits
        sim_clock.advance(600)
        assert await service.operations.reconcile()
        waiting = await line_of(fleet, instance_id, S.RESUMING)
        assert waiting.vast_status == "stopped" and "[vast: stopped]" in waiting.line
        assert waiting.committed_usd_per_h == waiting.price_usd_per_h  # budgeted at its full price once started
        sim_clock.advance(1800)  # fleet's default wait for a resume's GPU
        failed = await line_of(fleet, instance_id, S.FAILED, ticking=True)
        trigger = await eventually(lambda: fleet.trigger("p0", TriggerReason.INSTANCE_FAILED))
        # the decider run that trigger wakes: the real policy on fleet's snapshot, with tasks waiting, and its
        # commands sent to the provisioner as the decider sends them
        snapshot = await fleet.ask_snapshot()
        waiting_tasks = signal(sim_clock.now(), pending=40, rate_per_h=120)
        # the rules' sizing (mpc off): the one replacement the lost machine calls for, nothing hedged beside it
        recommendation = recommend(waiting_tasks, snapshot, sim_clock.now(), PolicyConfig(park=True, mpc=False))
        commands = policy_actions(recommendation, "decider-run-gpu-taken", sim_clock.now(), "decider")
        verbs = {LaunchInstances: "launch", DestroyInstance: "destroy"}
        for command in commands:
            await send(js, settings, verbs[type(command)], command)
        results = [await bus.result_for(command.idempotency_key) for command in commands]
    assert failed.failure_reason is FailureReason.GPU_TAKEN
    assert trigger.instance_id == instance_id
    assert "rented by someone else" in (trigger.detail or "")
    # replaced within that one run: the failed start destroyed and a new machine created on vast
    assert [(type(c).__name__, r.outcome) for c, r in zip(commands, results, strict=True)] == [
        ("LaunchInstances", "done"),
        ("DestroyInstance", "done"),
    ]
    assert isinstance(commands[0], LaunchInstances) and commands[0].reason is LaunchReason.REPLACEMENT
    [replacement] = results[0].instance_ids
    assert replacement != instance_id and replacement in simulator.world.instances
    assert simulator.world.instances[instance_id].destroyed_at is not None


async def test_a_resume_that_would_break_the_budget_is_refused_and_never_sent(rig: Rig) -> None:
    settings, js, bus, fleet, sim_clock = rig.settings, rig.js, rig.bus, rig.fleet, rig.clock
    simulator, url = await rig.start_vast(market_scenario(**STORAGE))
    async with fleet_and_provisioner(settings, sim_clock, url, budget_usd_per_h=1.0) as service:
        instance_id = await producing_machine(service, fleet, bus, js, settings)
        await send(js, settings, "stop", park("park-0003", instance_id))
        assert (await bus.result_for("park-0003")).outcome == "done"
        # the money the park freed is spent on another machine: $0.10 storage + $0.59 (+5 %) fits $1.00
        await send(js, settings, "launch", launch("launch-0003"))
        assert (await bus.result_for("launch-0003")).outcome == "done"
        manages = len(simulator.calls_to(Endpoint.MANAGE))
        await send(js, settings, "resume", resume("resume-0003", instance_id))
        refused = await bus.result_for("resume-0003")
        await send(js, settings, "resume", resume("resume-0004", 424242))
        unknown = await bus.result_for("resume-0004")
    assert (refused.outcome, refused.refusal_rule) == ("refused", RefusalRule.BUDGET_USD_PER_H), refused.detail
    assert len(simulator.calls_to(Endpoint.MANAGE)) == manages  # no start was sent
    assert simulator.world.instances[instance_id].intended == "stopped"
    assert (unknown.outcome, unknown.refusal_rule) == ("refused", RefusalRule.UNKNOWN_INSTANCE)


async def test_an_outbid_bid_is_tracked_parked_then_back_producing(rig: Rig) -> None:
    settings, js, bus, fleet, sim_clock = rig.settings, rig.js, rig.bus, rig.fleet, rig.clock
    scenario: Scenario = market_scenario(**STORAGE)
    simulator, url = await rig.start_vast(scenario)
    # an interruptible machine of ours (its label carries a launch key), bidding $0.30/h for a $0.48/h GPU
    request = CreateRequest(image="worker:1", disk=20, label="fleetpilot:bid-0001:0", price=0.3)
    instance_id = simulator.world.create(OFFER_A, request, sim_clock.now()).instance_id
    async with fleet_and_provisioner(settings, sim_clock, url) as service:
        sim_clock.advance(STARTUP_S + 60)
        assert await service.operations.reconcile()  # adopted by its label
        await line_of(fleet, instance_id, S.RUNNING)
        await fleet.task(instance_id, "completed", "bid-task-1")
        await line_of(fleet, instance_id, S.PRODUCING)

        simulator.world.set_bid_share("RTX 4090", 0.9, sim_clock.now())  # $0.43/h outbids $0.30/h
        sim_clock.advance(60)
        assert await service.operations.reconcile()
        paused = await line_of(fleet, instance_id, S.PARKED)
        outbid_trigger = await eventually(lambda: fleet.trigger("p0", TriggerReason.INSTANCE_FAILED))
        # a resume command cannot help: only a winning bid does
        await send(js, settings, "resume", resume("resume-bid-1", instance_id))
        not_ours = await bus.result_for("resume-bid-1")

        simulator.world.set_bid_share("RTX 4090", 0.1, sim_clock.now())  # the bid is the highest again
        sim_clock.advance(RESTART_S + 30)
        assert await service.operations.reconcile()
        await line_of(fleet, instance_id, S.RESUMING)
        await fleet.task(instance_id, "completed", "bid-task-2")
        await line_of(fleet, instance_id, S.PRODUCING)
    assert paused.park_reason is ParkReason.OUTBID and "parked(outbid)" in paused.line
    assert paused.committed_usd_per_h == paused.price_usd_per_h  # vast may resume it at any moment
    assert outbid_trigger.instance_id == instance_id
    assert (not_ours.outcome, not_ours.refusal_rule) == ("refused", RefusalRule.NOT_PARKED)
    assert simulator.calls_to(Endpoint.MANAGE) == []  # nobody stopped or started it: vast did
    await eventually(lambda: [o.state for o in bus.observed_of(instance_id)][-2:] == [S.PARKED, S.RUNNING])


async def test_a_resume_that_would_pass_the_daily_cap_by_midnight_is_refused_and_never_sent(rig: Rig) -> None:
    """The hourly budget has room; the day has not: 08:11 UTC, about 15.8 h to midnight. Machine A parked and
    machine B launched commit ~$9.9 of the day; A back at full price would make ~$16, over the $13 cap."""
    js, bus, fleet, sim_clock = rig.js, rig.bus, rig.fleet, rig.clock
    settings = rig.settings.model_copy(update={"daily_budget_usd": 13.0})
    simulator, url = await rig.start_vast(market_scenario(**STORAGE))
    async with fleet_and_provisioner(settings, sim_clock, url) as service:
        instance_id = await producing_machine(service, fleet, bus, js, settings)
        await send(js, settings, "stop", park("park-0005", instance_id))
        assert (await bus.result_for("park-0005")).outcome == "done"
        await send(js, settings, "launch", launch("launch-0005"))
        assert (await bus.result_for("launch-0005")).outcome == "done"
        manages = len(simulator.calls_to(Endpoint.MANAGE))
        await send(js, settings, "resume", resume("resume-0005", instance_id))
        refused = await bus.result_for("resume-0005")
    assert (refused.outcome, refused.refusal_rule) == ("refused", RefusalRule.DAILY_BUDGET_USD), refused.detail
    assert "over the daily cap $13.00" in refused.detail
    assert len(simulator.calls_to(Endpoint.MANAGE)) == manages  # no start was sent
    assert simulator.world.instances[instance_id].intended == "stopped"
