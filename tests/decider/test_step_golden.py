"""One recorded sequence, two callers of the decider's step: production (fleet and the decider on a real nats-server
and redis-server) and the world simulator's adapter. Both must send the same commands with the same verdicts.

The sequence holds an outbid pause (a P0 in production: capacity lost unplanned), a new machine loading (a P1,
debounced) and one coming up running (a P0), each against a demand signal that asks for more machines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from services.decider.config import DeciderSettings
from services.decider.runner import Decider
from services.fleet.app import build as build_fleet
from services.fleet.config import FleetSettings
from shared.clock import SimulatedClock
from shared.contract import (
    Action,
    DecisionRecord,
    DemandSignal,
    DemandState,
    DestroyInstance,
    DrainInstance,
    GuardrailVerdict,
    InstanceObserved,
    InstanceState,
    LaunchInstances,
    ParkReason,
    ResumeInstance,
    StopInstance,
    TaskEvent,
    TriggerRef,
)
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import DEMAND, INSTANCES, LATEST, TRIGGERS
from sim.world.policies.predictive import EPOCH, PredictiveAdapter
from tests.decider.factories import signal
from tests.decider.harness import FAST, Collector, audit_log, collect, publish, running_decider
from tests.helpers import eventually

S = InstanceState
FLEET = FleetSettings(tick_s=5)
DECIDER = DeciderSettings.model_validate(FAST)
BUDGET_USD_PER_H = 5.0  # low enough that the budget trims the launch the outbid pause asks for
P1_WAIT_S = 1.0  # past FAST's P1 quiet time: a debounced trigger runs once the clock has moved this far


@dataclass(frozen=True)
class Step:
    """One moment of the recording: what demand says, and one provisioner observation fleet receives."""

    at_s: float
    signal: DemandSignal
    observed: InstanceObserved


def observed(at: datetime, instance_id: int, state: InstanceState, **fields: Any) -> InstanceObserved:
    values: dict[str, Any] = {"gpu_model": "RTX 4090", "price_usd_per_h": 0.5, "vast_actual_status": state.value}
    return InstanceObserved(
        occurred_at=at, source="provisioner", instance_id=instance_id, state=state, **{**values, **fields}
    )


def completed(at: datetime, instance_id: int) -> TaskEvent:
    return TaskEvent(
        occurred_at=at,
        source="jobs",
        kind="completed",
        task_id=f"setup-{instance_id}",
        worker_id=f"worker-{instance_id}",
        instance_id=instance_id,
        duration_s=240.0,
    )


def setup() -> tuple[list[InstanceObserved], list[TaskEvent]]:
    """Three producing machines before the recording starts; #3 is a bid."""
    machines = [observed(EPOCH, iid, S.RUNNING, interruptible=iid == 3) for iid in (1, 2, 3)]
    return machines, [completed(EPOCH, iid) for iid in (1, 2, 3)]


def recording() -> list[Step]:
    def at(seconds: float) -> datetime:
        return EPOCH + timedelta(seconds=seconds)

    def short(seconds: float, producing: int) -> DemandSignal:
        return signal(at(seconds), state=DemandState.UNDER_PROVISIONED, pending=60, rate_per_h=600,
                      producing_workers=producing, above_capacity_for_s=1800)  # fmt: skip

    outbid = observed(at(60), 3, S.PARKED, park_reason=ParkReason.OUTBID, interruptible=True,
                      vast_actual_status="stopped", storage_usd_per_h=0.02)  # fmt: skip
    return [
        Step(60, short(60, 2), outbid),
        Step(120, short(120, 2), observed(at(120), 4, S.LOADING, vast_actual_status="loading")),
        Step(180, short(180, 2), observed(at(180), 5, S.RUNNING)),
    ]


@dataclass(frozen=True)
class Decided:
    """What one run decided, as both sides can show it (idempotency keys and event ids differ by caller)."""

    started_at: datetime
    triggers: list[tuple[str, str | None]]
    verdicts: list[dict[str, Any]]
    commands: list[dict[str, Any]]


def _action(action: Action) -> dict[str, Any]:
    # the fence and the expiry are stamped by the runner as it publishes, not decided by the step
    return action.model_dump(exclude={"event_id", "idempotency_key", "fencing_token", "expires_at"})


def _triggers(refs: Sequence[TriggerRef]) -> list[tuple[str, str | None]]:
    return [(ref.priority, ref.reason.value if ref.reason else None) for ref in refs]


def _verdict(verdict: GuardrailVerdict) -> dict[str, Any]:
    return {**verdict.model_dump(exclude={"action"}), "action": _action(verdict.action)}


# --- production: fleet and the decider over NATS ----------------------------------------------------------------

COMMAND_MODELS: dict[str, type[Action]] = {
    "launch": LaunchInstances,
    "resume": ResumeInstance,
    "stop": StopInstance,
    "destroy": DestroyInstance,
}


async def listen_for_commands(nc: NatsClient, settings: Settings) -> list[Collector]:
    subjects = settings.subjects
    collectors = [await collect(nc, subjects.provision_command(verb), m) for verb, m in COMMAND_MODELS.items()]
    return [*collectors, await collect(nc, subjects.fleet_drain, DrainInstance)]


async def sent_commands(collectors: list[Collector], keys: list[str]) -> list[Action]:
    """The commands a run sent, in its order, once each has arrived."""

    def by_key() -> dict[str, Action]:
        return {command.idempotency_key: command for c in collectors for command in c.items}

    await eventually(lambda: all(key in by_key() for key in keys))
    return [by_key()[key] for key in keys]


async def fleet_ready(js: JetStreamContext, nc: NatsClient, settings: Settings) -> None:
    """fleet has taken in the setup and published its triggers (the decider, started after, hears none of them)."""
    subjects = settings.subjects
    machines, tasks = setup()
    for machine in machines:
        await publish(js, subjects.provision_instance(machine.state), machine, INSTANCES.name(subjects))
    for task in tasks:
        await publish(js, subjects.task(task.kind), task, DEMAND.name(subjects))

    async def triggers_published() -> bool:
        # each machine: new → running (p0), registered and producing (p1)
        return (await js.stream_info(TRIGGERS.name(subjects))).state.messages == 3 * len(machines)

    await eventually(triggers_published)


async def run_production(
    settings: Settings, js: JetStreamContext, nc: NatsClient, clock: SimulatedClock
) -> list[Decided]:
    subjects = settings.subjects
    fleet = build_fleet(ServiceContext("fleet", settings, clock), FLEET)
    await fleet.start()
    decided: list[Decided] = []
    try:
        await fleet_ready(js, nc, settings)
        commands = await listen_for_commands(nc, settings)
        audit = await audit_log(nc, settings)
        async with running_decider(settings, clock=clock) as (decider, _):
            for step in recording():
                await clock.advance_and_settle((EPOCH + timedelta(seconds=step.at_s) - clock.now()).total_seconds())
                await publish(js, subjects.demand_signal, step.signal, LATEST.name(subjects))
                state = step.observed.state
                await publish(js, subjects.provision_instance(state), step.observed, INSTANCES.name(subjects))
                record = await one_run(decider, audit, clock, len(decided))
                keys = list(record.commands_sent)
                decided.append(
                    Decided(
                        record.started_at,
                        _triggers(record.triggers),
                        [_verdict(v) for v in record.verdicts],
                        [_action(c) for c in await sent_commands(commands, keys)],
                    )
                )
    finally:
        await fleet.stop()
    return decided


async def one_run(decider: Decider, audit: Collector, clock: SimulatedClock, before: int) -> DecisionRecord:
    """The run the step's trigger starts: at once for a P0, once the clock passes the P1 quiet time for a P1."""

    def heard() -> bool:
        return len(audit.items) > before or bool(decider.scheduler.pending)

    await eventually(heard)
    if len(audit.items) == before and all(ref.priority == "p1" for ref in decider.scheduler.pending):
        await clock.advance_and_settle(P1_WAIT_S)

    def finished() -> DecisionRecord | None:
        done = len(audit.items) > before and not decider.scheduler.running
        return audit.items[before] if done else None

    record: DecisionRecord = await eventually(finished)
    assert len(audit.items) == before + 1  # one run per step
    return record


# --- the world: its adapter on the same recording ---------------------------------------------------------------


def run_world(settings: Settings) -> list[Decided]:
    adapter = PredictiveAdapter(
        DECIDER.guardrail_config(settings),
        policy=DECIDER.policy_config(settings),
        triggers=DECIDER.trigger_config(),
        fleet=FLEET,
    )
    machines, tasks = setup()
    for machine in machines:
        adapter.observe_instance(machine, EPOCH)
    for task in tasks:
        adapter.fleet.observe_task(task, EPOCH)
    decided = []
    for step in recording():
        at = EPOCH + timedelta(seconds=step.at_s)
        refs = adapter.observe_instance(step.observed, at)
        run = adapter.run_if_due(refs, step.signal, at) or adapter.run_if_due(
            [], step.signal, at + timedelta(seconds=P1_WAIT_S)
        )
        assert run is not None
        decided.append(
            Decided(
                run.snapshot.occurred_at,
                _triggers(run.batch.triggers),
                [_verdict(v) for v in run.plan.verdicts],
                [_action(c) for c in run.plan.commands],
            )
        )
    return decided


async def test_production_and_the_world_decide_the_same_on_one_recording(
    settings: Settings, js: JetStreamContext, nc: NatsClient
) -> None:
    settings = settings.model_copy(update={"budget_usd_per_h": BUDGET_USD_PER_H})
    world = run_world(settings)
    real = await run_production(settings, js, nc, SimulatedClock(EPOCH))

    assert [d.triggers for d in real] == [
        [("p0", "instance_failed")],  # the outbid pause: capacity lost unplanned
        [("p1", "instance_transition")],
        [("p0", "instance_running")],
    ]
    assert any(d.commands for d in real) and any(v["rule"] for d in real for v in d.verdicts)
    for step, (production_run, world_run) in enumerate(zip(real, world, strict=True)):
        assert world_run == production_run, f"step {step}"
