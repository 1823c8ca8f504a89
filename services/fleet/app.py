"""fleet's wiring: provisioner observations, task events, bench verdicts, drain commands and queue snapshots
into the lifecycle core; transitions, triggers, bench requests and the fleet snapshot out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from faststream.asgi import AsgiFastStream
from faststream.nats.annotations import NatsMessage

from services.fleet.config import FleetSettings
from services.fleet.core import Alert, FleetCore, Transition
from services.fleet.metrics import FleetMetrics
from services.fleet.saved import meta_of, restored_core, take_changes
from services.fleet.store import FleetStore
from shared.bus import answer_request, durable_pull, publish_event, unread_after
from shared.contract import (
    BenchRequest,
    BenchResult,
    DrainInstance,
    FleetSnapshot,
    FleetSnapshotRequest,
    InstanceObserved,
    InstanceState,
    InstanceTransitioned,
    QueueSnapshot,
    TaskEvent,
    Trigger,
)
from shared.service import ServiceContext, asgi_app, stop_tasks
from shared.settings import Settings
from shared.streams import BENCH, COMMANDS, DEMAND, INSTANCES, LATEST, TRIGGERS

SERVICE = "fleet"

log = logging.getLogger("fleetpilot.fleet")


class FleetRuntime:
    """The adapter around the core: load it, save what changed, then say what happened; a timer for limits."""

    def __init__(self, ctx: ServiceContext, config: FleetSettings) -> None:
        self.ctx = ctx
        self.config = config
        self.metrics = FleetMetrics(ctx.metrics.registry)
        self.store = FleetStore(ctx.settings.redis_url, ctx.settings.subject_prefix)
        self.core = FleetCore(config)
        self.lock = asyncio.Lock()
        self.timer: asyncio.Task[None] | None = None
        self.stopping = False
        self.restored = False  # until the saved state has been read from Redis
        self.last_snapshot_s: float | None = None

    async def restore(self) -> None:
        try:
            records, meta = await self.ctx.read_redis(self.store.load, "fleet's saved state")
            self.restored = True  # read (what it says, if anything, is taken or set aside below)
            if not records and meta is None:
                log.info("no saved fleet state: starting empty")
                return
            self.core = restored_core(records, meta, self.ctx.clock.now(), self.config)
        except (KeyError, TypeError, ValueError) as error:  # pydantic's ValidationError is a ValueError
            # never refuse to start on a damaged state: the provisioner's observations rebuild the fleet
            log.error("saved fleet state unreadable (%s): starting empty", error)
            return
        log.info("fleet state restored: %d instances", len(self.core.instances))

    async def save(self) -> None:
        async with self.lock:
            records, deleted = take_changes(self.core)
            try:
                await self.store.save(records, deleted, meta_of(self.core))
            except BaseException:
                self.core.dirty.update(r["instance_id"] for r in records)
                self.core.purged.update(deleted)
                raise

    async def settle(self, transitions: list[Transition], alerts: Sequence[Alert] = (), *, save: bool = False) -> None:
        """Save first, then publish: what others hear about is already durable here."""
        self.metrics.ignored(self.core.ignored_moves)
        self.metrics.refused(self.core.refused_task_events)
        if transitions or alerts or save:
            await self.save()
        for transition in transitions:
            await self.announce(transition)
        for alert in alerts:
            trigger = Trigger(
                event_id=f"fleet-{alert.reason.value}-{int(alert.at.timestamp())}",
                occurred_at=alert.at,
                source=SERVICE,
                priority="p0",
                reason=alert.reason,
                detail=alert.detail[:500],
            )
            await self.publish_trigger(trigger)

    async def announce(self, t: Transition) -> None:
        subjects = self.ctx.subjects
        # an instance enters each state once, except around parking (counted by `visit`): a re-publish of the
        # same entry has the same id, and JetStream de-duplicates it
        key = f"fleet-{t.instance_id}-{t.to_state.value}" + (f"-{t.visit}" if t.visit > 1 else "")
        event = InstanceTransitioned(
            event_id=key,
            occurred_at=t.at,
            source=SERVICE,
            instance_id=t.instance_id,
            from_state=t.from_state,
            to_state=t.to_state,
            failure_reason=t.failure_reason,
            park_reason=t.park_reason,
            gpu_model=t.gpu_model,
            price_usd_per_h=t.price_usd_per_h,
            host_id=t.host_id,
            machine_id=t.machine_id,
            detail=t.detail,
        )
        await publish_event(
            self.ctx.broker, subjects.fleet_instance(t.to_state), event, stream=INSTANCES.name(subjects)
        )
        self.metrics.transitioned(t)
        from_text = t.from_state.value if t.from_state else "new"
        trigger = Trigger(
            event_id=f"{key}-trigger",
            occurred_at=t.at,
            source=SERVICE,
            priority=t.trigger_priority,
            reason=t.trigger_reason,
            detail=f"#{t.instance_id} {from_text} -> {t.to_state.value}: {t.detail}"[:500],
            instance_id=t.instance_id,
        )
        await self.publish_trigger(trigger)
        if t.to_state == InstanceState.REGISTERED:
            record = self.core.instances.get(t.instance_id)
            request = BenchRequest(
                event_id=f"fleet-bench-{t.instance_id}",
                occurred_at=t.at,
                source=SERVICE,
                instance_id=t.instance_id,
                kind="gpu",
                reason="newly registered: judge it before it counts as capacity",
                # from vast's listing via the provisioner: bench trusts these, never the host's own claims
                label=record.label if record else None,
                gpu_model=record.gpu_model if record else t.gpu_model,
                num_gpus=record.num_gpus if record else None,
            )
            await publish_event(self.ctx.broker, subjects.bench_request, request, stream=BENCH.name(subjects))

    async def publish_trigger(self, trigger: Trigger) -> None:
        subjects = self.ctx.subjects
        await publish_event(
            self.ctx.broker,
            subjects.trigger(trigger.priority, trigger.reason),
            trigger,
            stream=TRIGGERS.name(subjects),
        )
        self.metrics.triggers.labels(trigger.priority, trigger.reason.value).inc()

    async def publish_snapshot(self) -> FleetSnapshot:
        now = self.ctx.clock.now()
        snapshot = self.core.snapshot(now)
        self.core.changed = False
        subjects = self.ctx.subjects
        await publish_event(self.ctx.broker, subjects.fleet_snapshot_published, snapshot, stream=LATEST.name(subjects))
        self.metrics.snapshot(snapshot)
        self.last_snapshot_s = now.timestamp()
        return snapshot

    async def tick(self) -> None:
        """Time-in-state limits, then the snapshot if something changed or the interval has passed."""
        now = self.ctx.clock.now()
        result = self.core.check(now)
        await self.settle(result.transitions, result.alerts)
        await self.save()  # task-event bookkeeping (last heard, counts) is saved here rather than per event
        due = self.last_snapshot_s is None or now.timestamp() - self.last_snapshot_s >= self.config.snapshot_interval_s
        if self.core.changed or due:
            await self.publish_snapshot()

    async def tick_forever(self) -> None:
        while not self.stopping:
            try:
                await self.tick()
            except Exception:
                log.exception("fleet tick failed; retrying at the next one")
            await self.ctx.clock.sleep(self.config.tick_s)

    async def start(self) -> None:
        self.stopping = False
        self.timer = asyncio.create_task(self.tick_forever(), name="fleet-tick")

    async def stop(self) -> None:
        self.stopping = True
        if self.timer is not None:
            await stop_tasks([self.timer])
        if not self.restored:  # stopped while waiting for Redis: an empty state must not overwrite the saved one
            return
        try:
            await self.save()
        except Exception:
            log.exception("final save failed")

    async def close(self) -> None:
        await self.store.close()


def build(ctx: ServiceContext, config: FleetSettings | None = None) -> AsgiFastStream:
    config = config or FleetSettings()
    runtime = FleetRuntime(ctx, config)
    subjects, settings, clock = ctx.subjects, ctx.settings, ctx.clock

    @ctx.broker.subscriber(subjects.provision_instance_all, **durable_pull(INSTANCES, settings, "fleet-instances"))
    async def on_instance_observed(observed: InstanceObserved) -> None:
        await runtime.settle(runtime.core.observe_instance(observed, clock.now()), save=True)

    @ctx.broker.subscriber(subjects.tasks_all, **durable_pull(DEMAND, settings, "fleet-tasks"))
    async def on_task_event(event: TaskEvent, msg: NatsMessage) -> None:
        ctx.count_unknown_fields(event)
        await runtime.settle(runtime.core.observe_task(event, clock.now(), unread_after(msg.raw_message)))

    @ctx.broker.subscriber(subjects.queue, **durable_pull(DEMAND, settings, "fleet-queue"))
    async def on_queue_snapshot(snapshot: QueueSnapshot) -> None:
        ctx.count_unknown_fields(snapshot)
        runtime.core.observe_queue(snapshot, clock.now())

    @ctx.broker.subscriber(subjects.bench_result, **durable_pull(BENCH, settings, "fleet-bench"))
    async def on_bench_result(result: BenchResult) -> None:
        await runtime.settle(runtime.core.observe_bench(result, clock.now()), save=True)

    @ctx.broker.subscriber(subjects.fleet_drain, **durable_pull(COMMANDS, settings, "fleet-drain"))
    async def on_drain(command: DrainInstance) -> None:
        await runtime.settle(runtime.core.drain(command, clock.now()), save=True)

    # no_reply: the answer goes out through answer_request, which sends it to an inbox only
    @ctx.broker.subscriber(subjects.fleet_snapshot, no_reply=True)
    async def on_snapshot_request(request: FleetSnapshotRequest, msg: NatsMessage) -> None:
        await answer_request(ctx.broker, ctx.metrics, msg, runtime.core.snapshot(clock.now()))

    app = asgi_app(ctx)
    app.restores.append(runtime.restore)  # before its first message, once Redis answers
    app.after_startup(runtime.start)
    app.on_shutdown(runtime.stop)
    app.after_shutdown(runtime.close)
    return app


def create_app(settings: Settings | None = None) -> AsgiFastStream:
    """Entry point for `faststream run services.fleet.app:create_app --factory` and `fleetpilot run fleet`."""
    return build(ServiceContext.from_settings(SERVICE, settings))
