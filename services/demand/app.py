"""demand's wiring: task events in batches into the core, acked only once Redis holds their effect; the
DemandSignal out on a cadence and on material change, with its triggers.

The task stream (the one with volume) is read by a plain nats-py pull loop rather than a FastStream
subscriber: FastStream 0.7.8's batch pull catches only nats' own TimeoutError, so the bare
asyncio.TimeoutError that nats-py 2.16 raises when a fetch deadline lapses between its two requests kills
the loop and drops the partial batch (redelivered only after ack_wait); and per-message dispatch would
cost more than the core itself. Queue and fleet snapshots (a few a minute) use ordinary subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from typing import Any

import pydantic
from faststream.asgi import AsgiFastStream
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig

from services.demand.config import DemandSettings
from services.demand.core import DemandCore
from services.demand.metrics import DemandMetrics
from services.demand.records import Evaluation, IngestOutcome
from services.demand.saved import restored, saved_of
from services.demand.store import DemandStore
from shared.bus import DeadLetterMiddleware, ImplausibleInput, delivery_count, durable_pull, publish_event, unread_after
from shared.contract import FleetSnapshot, QueueSnapshot, TaskEvent, Trigger
from shared.service import ServiceContext, asgi_app, stop_tasks
from shared.settings import Settings
from shared.streams import DEMAND, LATEST, MAX_DELIVER, TRIGGERS, durable_consumer

SERVICE = "demand"
TASKS_DURABLE = "demand-tasks"
RECONNECT_WAIT_S = 0.5  # wall time between fetch attempts while the broker is unreachable

log = logging.getLogger("fleetpilot.demand")


async def finish_despite_cancellation(task: asyncio.Future[Any]) -> bool:
    """Wait for `task` to end even when cancelled meanwhile; True if we were. A checkpoint cancelled at shutdown
    while Redis ran its transaction could not tell whether the ids were journalled, journalled them again at the
    final checkpoint, and the fault suite saw events "applied twice" (the wait is bounded by the store's timeout)."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # the task's own failure: the caller reads it from the task
            break
    return cancelled


class DemandRuntime:
    """The adapter around the core: restores it from Redis, checkpoints it, acks, evaluates on a timer."""

    def __init__(self, ctx: ServiceContext, config: DemandSettings) -> None:
        self.ctx = ctx
        self.config = config
        self.metrics = DemandMetrics(ctx.metrics.registry)
        self.store = DemandStore(ctx.settings.redis_url, ctx.settings.subject_prefix, config.seen_event_ids)
        self.core = DemandCore(config)
        self.unacked: list[Msg] = []  # applied, waiting for the checkpoint that makes them durable
        self.lock = asyncio.Lock()
        # checkpoints whose answer was lost (token → how many journal ids it carried), until one is answered
        self.unanswered_checkpoints: dict[str, int] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = False
        self.restored = False  # until the saved state has been read from Redis
        self.dead_letters = next(m for m in ctx.broker.middlewares if isinstance(m, DeadLetterMiddleware))

    async def restore(self) -> None:
        try:
            state, seen_ids = await self.ctx.read_redis(self.store.load, "demand's saved state")
            self.restored = True  # read (what it says, if anything, is taken or set aside below)
            if state is None:
                log.info("no saved demand state: starting with empty windows")
                return
            self.core = restored(state, self.config, seen_ids)
        except (KeyError, TypeError, ValueError) as error:  # pydantic's ValidationError is a ValueError
            # never refuse to start on an old state: the windows refill from the stream and new events
            log.error("saved demand state unreadable (%s): starting with empty windows", error)
            return
        log.info("demand state restored: %d remembered event ids, signal seq %d", len(seen_ids), self.core.signal_seq)

    async def ingest_batch(self, messages: list[Msg]) -> None:
        now = self.ctx.clock.now()
        core, metrics = self.core, self.metrics
        for raw in messages:
            try:
                event = TaskEvent.model_validate_json(raw.data)
            except pydantic.ValidationError as error:
                await self.dead_letters.park(raw, "invalid_message", error, delivery_count(raw) or 1)
                await raw.ack()
                continue
            self.ctx.count_unknown_fields(event)
            try:
                outcome = core.ingest(event, now)
            except Exception as error:  # a fault of ours, not the message's: retry it, then park it
                deliveries = delivery_count(raw) or 1
                if deliveries < MAX_DELIVER:
                    log.warning("ingest failed (delivery %d of %d): %r", deliveries, MAX_DELIVER, error)
                    await raw.nak()
                else:
                    await self.dead_letters.park(raw, "handler_failed", error, deliveries)
                    await raw.ack()
                continue
            if outcome == IngestOutcome.DUPLICATE:
                self.ctx.metrics.duplicates_ignored.labels(SERVICE).inc()
            else:
                metrics.ingested(event, outcome)
            self.unacked.append(raw)
        caught_up = len(messages) < self.config.batch_size
        if caught_up or len(self.unacked) >= self.config.checkpoint_every_events:
            await self.checkpoint()

    async def checkpoint(self) -> None:
        """Persist the core, then ack what it holds: a crash before the ack redelivers events that the saved
        state does not hold yet, or that its remembered ids will recognise."""
        async with self.lock:
            to_ack, self.unacked = self.unacked, []
            seen_ids = self.core.seen.take_journal()
            token = uuid.uuid4().hex
            saving = asyncio.ensure_future(
                self.store.save(saved_of(self.core), seen_ids, token, self.unanswered_checkpoints)
            )
            cancelled = await finish_despite_cancellation(saving)
            failure = None if saving.cancelled() else saving.exception()
            if saving.cancelled() or failure is not None:  # the next checkpoint must still ack and journal these
                self.unacked = to_ack + self.unacked
                self.core.seen.restore_journal(seen_ids)
                # Redis may have applied it and died before answering: the next checkpoint asks
                self.unanswered_checkpoints[token] = len(seen_ids)
                if cancelled or failure is None:
                    raise asyncio.CancelledError
                raise failure
            self.unanswered_checkpoints = {}
            for raw in to_ack:
                await raw.ack()
            if cancelled:
                raise asyncio.CancelledError

    async def checkpoint_observation(self) -> None:
        """After a queue or fleet snapshot: a failed checkpoint must not fail the handler. A snapshot is a latest
        value, resent every minute, so acking it before Redis holds it loses at most a minute's view, whereas
        failing would spend its redeliveries in milliseconds and dead-letter it while Redis is away."""
        try:
            await self.checkpoint()
        except Exception as error:
            log.warning("checkpoint after a snapshot failed (%r); the next checkpoint holds it", error)

    async def evaluate(self) -> Evaluation:
        evaluation = self.core.evaluate(self.ctx.clock.now())
        self.metrics.evaluated(evaluation)
        subjects = self.ctx.subjects
        if evaluation.publish:
            await publish_event(
                self.ctx.broker, subjects.demand_signal, evaluation.signal, stream=LATEST.name(subjects)
            )
        for intent in evaluation.triggers:
            trigger = Trigger(
                occurred_at=evaluation.signal.occurred_at,
                source=SERVICE,
                priority=intent.priority,
                reason=intent.reason,
                detail=intent.detail[:500],
            )
            await publish_event(
                self.ctx.broker,
                subjects.trigger(intent.priority, intent.reason),
                trigger,
                stream=TRIGGERS.name(subjects),
            )
        await self.checkpoint()  # the verdict's memory (trend, since-when) survives a restart too
        return evaluation

    async def evaluate_forever(self) -> None:
        while not self.stopping:
            try:
                await self.evaluate()
            except Exception:
                log.exception("demand evaluation failed; retrying at the next interval")
            await self.ctx.clock.sleep(self.config.evaluate_interval_s)

    async def consume_tasks(self) -> None:
        """Pull batches from the durable task consumer until stopped; a short batch means we are caught up."""
        subjects = self.ctx.subjects
        consumer: ConsumerConfig = dataclasses.replace(
            durable_consumer(TASKS_DURABLE),
            # acks wait for a checkpoint, so allow a checkpoint's worth of messages in flight
            max_ack_pending=self.config.checkpoint_every_events + 2 * self.config.batch_size,
        )
        js = self.ctx.broker.config.connection_state.stream
        subscription = await js.pull_subscribe(
            subjects.tasks_all, durable=TASKS_DURABLE, stream=DEMAND.name(subjects), config=consumer
        )
        try:
            while not self.stopping:
                try:
                    messages = await subscription.fetch(self.config.batch_size, timeout=self.config.batch_wait_s)
                except TimeoutError:  # asyncio's and nats' alike: nothing arrived
                    messages = []
                except Exception as error:  # broker restarting: nats-py reconnects, the consumer stays
                    log.warning("task fetch failed (%r); retrying", error)
                    await asyncio.sleep(RECONNECT_WAIT_S)
                    continue
                # what is still to read after this batch: while much is, a missing completion proves no stall
                self.core.unread_task_events = unread_after(messages[-1]) if messages else 0
                try:
                    if messages:
                        await self.ingest_batch(messages)
                    elif self.unacked:
                        await self.checkpoint()
                except Exception as error:  # Redis away: what was applied stays unacked until a checkpoint holds it
                    log.warning("checkpoint failed (%r); retrying", error)
                    await asyncio.sleep(RECONNECT_WAIT_S)
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def start(self) -> None:
        self.stopping = False
        self.tasks = [
            asyncio.create_task(self.consume_tasks(), name="demand-consume"),
            asyncio.create_task(self.evaluate_forever(), name="demand-evaluate"),
        ]

    async def stop(self) -> None:
        self.stopping = True
        await stop_tasks(self.tasks)
        self.tasks = []
        if not self.restored:  # stopped while waiting for Redis: an empty state must not overwrite the saved one
            return
        try:
            await self.checkpoint()
        except Exception:
            log.exception("final checkpoint failed: unacked events will be redelivered")

    async def close(self) -> None:
        await self.store.close()


def build(ctx: ServiceContext, config: DemandSettings | None = None) -> AsgiFastStream:
    config = config or DemandSettings()
    runtime = DemandRuntime(ctx, config)
    subjects = ctx.subjects

    @ctx.broker.subscriber(subjects.queue, **durable_pull(DEMAND, ctx.settings, "demand-queue"))
    async def on_queue_snapshot(snapshot: QueueSnapshot) -> None:
        ctx.count_unknown_fields(snapshot)
        if (implausible := runtime.core.implausible(snapshot)) is not None:
            raise ImplausibleInput(implausible)  # dead-lettered with the reason and counted, never applied
        runtime.core.observe_queue(snapshot, ctx.clock.now())
        await runtime.checkpoint_observation()

    @ctx.broker.subscriber(subjects.fleet_snapshot_published, **durable_pull(LATEST, ctx.settings, "demand-fleet"))
    async def on_fleet_snapshot(snapshot: FleetSnapshot) -> None:
        runtime.core.observe_fleet(snapshot, ctx.clock.now())
        await runtime.checkpoint_observation()

    app = asgi_app(ctx)
    app.restores.append(runtime.restore)  # before its first message, once Redis answers
    app.after_startup(runtime.start)
    app.on_shutdown(runtime.stop)
    app.after_shutdown(runtime.close)
    return app


def create_app(settings: Settings | None = None) -> AsgiFastStream:
    """Entry point for `faststream run services.demand.app:create_app --factory` and `fleetpilot run demand`."""
    return build(ServiceContext.from_settings(SERVICE, settings))
