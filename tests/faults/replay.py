"""The job system for the fault suite: the job stand-in's world replayed on the shared clock, every publish retried
until JetStream acknowledges it, and every acknowledged event id kept, so "lost" and "duplicated" can be counted.

The demo's job runner (sim/jobs) gives up on a failed publish; a real job system with an outbox retries, with the
same Nats-Msg-Id, so a retry after a lost ack is de-duplicated by JetStream. That is the producer the exactly-once
checks assume, hence this driver instead of the demo's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import httpx
import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from shared.bus import event_headers
from shared.clock import Clock
from shared.contract import Event, QueueDepth, QueueSnapshot, TaskEvent
from shared.service import stop_tasks
from shared.settings import Settings
from shared.streams import DEMAND
from sim.jobs.runner import SOURCE, TASK_TYPE, throughput_factors, to_event, workers_up
from sim.jobs.world import JobWorld

log = logging.getLogger("fleetpilot.faults.replay")

PUBLISH_TIMEOUT_S = 2.0  # wall: one try; the retry loop is unbounded (an outbox does not drop events)
RETRY_WAIT_S = 0.2
# vast.ai spaces list calls 1 s apart per key; paging 1,000 instances (40 pages) faster than that is refused
LIST_SPACING_S = 1.1
MAX_LIST_CALLS = 200


async def _quiet(error: Exception) -> None:
    """Connection errors are expected here: the suite kills the broker."""


class Replayer:
    """Submits a per-minute arrival trace, runs tasks on the instances vast.ai lists as running, publishes steps."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        arrivals_per_min: Sequence[int],
        *,
        step_s: float = 30.0,
        worker_boot_s: float = 600.0,
        instance_poll_s: float = 60.0,
        trickle_every_min: int | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.trace = list(arrivals_per_min)
        self.step_s = step_s
        self.worker_boot_s = worker_boot_s
        self.instance_poll_s = instance_poll_s
        # after the trace: one task every this many simulated minutes, for as long as the replay runs (None: stop)
        self.trickle_every_min = trickle_every_min
        self.world = JobWorld()
        self.running_since: dict[int, datetime] = {}
        self.acked: dict[str, str] = {}  # event id → kind, in acknowledgement order
        self.recent: deque[TaskEvent] = deque(maxlen=1000)  # for re-publishing (the duplicate-delivery fault)
        self.publish_retries = 0
        self.running = asyncio.Event()  # cleared to pause
        self.running.set()
        self.idle = asyncio.Event()  # set while paused and no publish is in flight
        self._task: asyncio.Task[None] | None = None
        self.nc: NatsClient | None = None
        self.js: JetStreamContext | None = None

    async def start(self) -> None:
        self.nc = await nats.connect(
            servers=self.settings.nats_servers, max_reconnect_attempts=-1, reconnect_time_wait=0.2, error_cb=_quiet
        )
        self.js = self.nc.jetstream()
        self._task = asyncio.create_task(self._run(), name="fault-replayer")

    async def close(self) -> None:
        if self._task is not None:
            # not `cancel(); await task`: nats-py's wait_for can swallow the cancellation, and that await (with the
            # suite's teardown around it) would then wait for ever
            await stop_tasks([self._task])
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.close()

    async def pause(self) -> None:
        """Stop publishing (the world's clock goes on; the steps it owes are published on resume)."""
        self.running.clear()
        await self.idle.wait()

    def resume(self) -> None:
        self.running.set()

    @property
    def acked_ids(self) -> list[str]:
        return list(self.acked)

    async def publish(self, subject: str, event: Event, *, msg_id: str | None = None) -> None:
        """Until JetStream acknowledges it; `msg_id` other than the event id makes a distinct message of it."""
        assert self.js is not None
        headers = event_headers(event)
        if msg_id is not None:
            headers["Nats-Msg-Id"] = msg_id
        payload = event.model_dump_json().encode()
        while True:
            try:
                await self.js.publish(
                    subject,
                    payload,
                    headers=headers,
                    stream=DEMAND.name(self.settings.subjects),
                    timeout=PUBLISH_TIMEOUT_S,
                )
                return
            except Exception as error:  # broker away or JetStream not ready yet: the same message again
                self.publish_retries += 1
                log.debug("publish to %s failed (%r); retrying", subject, error)
                await asyncio.sleep(RETRY_WAIT_S)

    async def publish_task(self, event: TaskEvent, *, msg_id: str | None = None) -> None:
        await self.publish(self.settings.subjects.task(event.kind), event, msg_id=msg_id)
        self.acked[event.event_id] = event.kind
        self.recent.append(event)

    async def _run(self) -> None:
        api_key = self.settings.vast_api_key.get_secret_value()
        async with httpx.AsyncClient(
            base_url=self.settings.vast_api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=10.0
        ) as vast:
            start = self.clock.now()
            next_poll = start
            minute_done = 0
            while True:
                # `while`, not `if`: a resume and a pause in one go wake this loop with the pause already back in
                # force (and `pause` already returned, finding it idle); it must park again, not publish a step
                while not self.running.is_set():
                    self.idle.set()
                    await self.running.wait()
                    self.idle.clear()
                now = self.clock.now()
                elapsed_min = int((now - start).total_seconds() // 60)
                steps = []
                while minute_done <= min(elapsed_min, self._last_minute):
                    arrivals = self._arrivals(minute_done)
                    steps += self.world.submit(arrivals, start + timedelta(minutes=minute_done))
                    minute_done += 1
                if now >= next_poll:
                    await self._refresh_workers(vast, now)
                    next_poll = now + timedelta(seconds=self.instance_poll_s)
                    await self._publish_queue(now)
                steps += self.world.advance(now)
                events = [to_event(step) for step in steps]
                for offset in range(0, len(events), 200):
                    await asyncio.gather(*(self.publish_task(e) for e in events[offset : offset + 200]))
                await self.clock.sleep(self.step_s)

    @property
    def _last_minute(self) -> int:
        return len(self.trace) - 1 if self.trickle_every_min is None else 2**62

    def _arrivals(self, minute: int) -> int:
        if minute < len(self.trace):
            return self.trace[minute]
        return 1 if self.trickle_every_min and minute % self.trickle_every_min == 0 else 0

    async def _refresh_workers(self, vast: httpx.AsyncClient, now: datetime) -> None:
        listed = await self._list_instances(vast)
        if listed is None:
            return  # unknown, not empty
        factors = await throughput_factors(vast)
        self.world.set_workers(workers_up(listed, self.running_since, now, self.worker_boot_s, factors))

    async def _list_instances(self, vast: httpx.AsyncClient) -> list[dict[str, Any]] | None:
        """Every instance vast.ai lists, paged at the documented spacing, a refused page asked again; None when
        the list cannot be read (unknown, not empty)."""
        instances: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(MAX_LIST_CALLS):
            params = {"limit": "25", **({"after_token": token} if token else {})}
            try:
                response = await vast.get("/api/v1/instances/", params=params)
            except httpx.HTTPError:
                return None
            if response.status_code == 429 or response.status_code >= 500:
                await self.clock.sleep(LIST_SPACING_S)
                continue
            if response.status_code != 200:
                return None
            body = response.json()
            instances += body.get("instances", [])
            token = body.get("next_token")
            if not token:
                return instances
            await self.clock.sleep(LIST_SPACING_S)
        return None

    async def _publish_queue(self, now: datetime) -> None:
        snapshot = QueueSnapshot(
            occurred_at=now,
            source=SOURCE,
            queues=[QueueDepth(task_type=TASK_TYPE, pending=self.world.pending, running=self.world.running)],
        )
        await self.publish(self.settings.subjects.queue, snapshot)

    def summary(self) -> dict[str, Any]:
        return {
            "tasks_submitted": self.world.submitted,
            "tasks_completed": self.world.completed,
            "tasks_pending": self.world.pending,
            "events_acked": len(self.acked),
            "publish_retries": self.publish_retries,
        }
