"""The job system stand-in as a process: replays a trace, runs tasks on the instances vast.ai says are running,
and publishes every task step and a queue snapshot per minute to NATS, as a real job system would.

It learns which machines exist the way a job system's workers would: an instance's worker comes up a while
after vast.ai reports it running (image start, registration), and stops when the instance stops.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import nats.errors
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from shared.bus import event_headers, nats_connect_options
from shared.clock import Clock
from shared.contract import Event, QueueDepth, QueueSnapshot, TaskEvent
from shared.gpu_models import reference_tasks_per_h
from shared.settings import Settings
from shared.streams import DEMAND
from sim.jobs.suite import DemoMachineSuites
from sim.jobs.world import REFERENCE_TASKS_PER_H, JobWorld, TaskStep

log = logging.getLogger("fleetpilot.jobs")
SOURCE = "job-system"
TASK_TYPE = "prove"


@dataclass(frozen=True)
class JobRunConfig:
    trace: list[int]  # arrivals per minute
    step_s: float = 30.0  # simulated seconds between world steps
    worker_boot_s: float = 600.0  # a running instance's worker registers this long after vast says running
    instance_poll_s: float = 60.0
    drain_limit_s: float = 4 * 3600.0  # after the trace, stop once the queue is empty or after this long
    summary_path: Path | None = None
    # where a booting machine files its GPU suite report (bench's intake), as vast's onstart would make it
    bench_report_url: str | None = None
    bench_min_time_s: float = 0.05  # per measurement of the suite's CPU variant: short, the demo runs many


def window_of(arrivals: list[int], start_minute: int, minutes: int | None, scale: float) -> list[int]:
    """A slice of a trace, scaled (rounding carried forward, so the total is scaled exactly)."""
    chosen = arrivals[start_minute : start_minute + minutes if minutes else None]
    scaled, carry = [], 0.0
    for count in chosen:
        exact = count * scale + carry
        scaled.append(int(exact))
        carry = exact - int(exact)
    return scaled


async def running_instances(client: httpx.AsyncClient) -> list[dict[str, Any]] | None:
    """Every instance vast.ai lists (paging v1); None when the list could not be read (unknown, not empty)."""
    instances: list[dict[str, Any]] = []
    token: str | None = None
    try:
        while True:
            params: dict[str, str] = {"limit": "25"}
            if token:
                params["after_token"] = token
            response = await client.get("/api/v1/instances/", params=params)
            if response.status_code != 200:
                return None
            body = response.json()
            instances += body.get("instances", [])
            token = body.get("next_token")
            if not token:
                return instances
    except httpx.HTTPError:
        return None


async def throughput_factors(client: httpx.AsyncClient) -> dict[int, float]:
    """The simulator's truth about slow machines (its ledger); a real vast.ai has no such route."""
    try:
        response = await client.get("/_sim/ledger")
        if response.status_code != 200:
            return {}
        return {int(e["instance_id"]): float(e["throughput_factor"]) for e in response.json()["entries"]}
    except (httpx.HTTPError, KeyError, ValueError):
        return {}


def workers_up(
    listed: list[dict[str, Any]],
    running_since: dict[int, datetime],
    now: datetime,
    worker_boot_s: float,
    factors: dict[int, float],
) -> dict[int, tuple[str, float]]:
    """The workers serving now, by instance: GPU model and tasks/h (its model's reference × GPUs × the machine's
    own speed), for the instances vast has said are running for at least a worker's boot time.

    `running_since` remembers when each instance was first seen running; it is updated here.
    """
    up: dict[int, tuple[str, float]] = {}
    for instance in listed:
        instance_id = int(instance["id"])
        if instance.get("actual_status") != "running":
            running_since.pop(instance_id, None)
            continue
        since = running_since.setdefault(instance_id, now)
        if (now - since).total_seconds() < worker_boot_s:
            continue
        gpu_model = str(instance.get("gpu_name") or "unknown")
        per_gpu = reference_tasks_per_h(gpu_model) or REFERENCE_TASKS_PER_H
        up[instance_id] = (gpu_model, per_gpu * int(instance.get("num_gpus") or 1) * factors.get(instance_id, 1.0))
    return up


@retry(
    stop=stop_after_attempt(8),
    wait=wait_exponential(multiplier=0.2, max=5.0),
    retry=retry_if_exception_type((nats.errors.Error, asyncio.TimeoutError)),
    reraise=True,
)
async def publish_with_retry(js: Any, subject: str, event: Event, stream: str) -> None:
    """A job system retries an unacknowledged publish with the same Nats-Msg-Id: JetStream keeps it one event."""
    await js.publish(subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream)


def to_event(step: TaskStep) -> TaskEvent:
    return TaskEvent(
        occurred_at=step.at,
        source=SOURCE,
        kind=step.kind,
        task_id=step.task_id,
        task_type=TASK_TYPE,
        worker_id=step.worker_id,
        instance_id=step.instance_id,
        gpu_model=step.gpu_model,
        duration_s=step.duration_s,
    )


class JobRunner:
    def __init__(self, settings: Settings, clock: Clock, config: JobRunConfig) -> None:
        self.settings = settings
        self.clock = clock
        self.config = config
        self.world = JobWorld()
        self.running_since: dict[int, datetime] = {}
        self.reported: set[int] = set()
        url = config.bench_report_url
        self.suites = DemoMachineSuites(url, min_time_s=config.bench_min_time_s) if url else None

    async def run(self) -> dict[str, Any]:
        nc = await nats.connect(**nats_connect_options(self.settings), max_reconnect_attempts=-1)
        js = nc.jetstream()
        api_key = self.settings.vast_api_key.get_secret_value()
        headers = {"Authorization": f"Bearer {api_key}"}
        async with httpx.AsyncClient(base_url=self.settings.vast_api_url, headers=headers, timeout=10.0) as vast:
            start = self.clock.now()
            next_poll = start
            minute_done = 0
            while True:
                now = self.clock.now()
                elapsed_min = int((now - start).total_seconds() // 60)
                steps: list[TaskStep] = []
                while minute_done <= min(elapsed_min, len(self.config.trace) - 1):
                    at = start + timedelta(minutes=minute_done)
                    steps += self.world.submit(self.config.trace[minute_done], at)
                    minute_done += 1
                if now >= next_poll:
                    await self._refresh_workers(vast, now)
                    next_poll = now + timedelta(seconds=self.config.instance_poll_s)
                    await self._publish_queue(js, now)
                steps += self.world.advance(now)
                await self._publish(js, steps)
                trace_over = minute_done >= len(self.config.trace)
                drained = self.world.pending == 0 and self.world.running == 0
                overdue = (now - start).total_seconds() > len(self.config.trace) * 60 + self.config.drain_limit_s
                if trace_over and (drained or overdue):
                    break
                await self.clock.sleep(self.config.step_s)
        await nc.drain()
        if self.suites is not None:
            await self.suites.aclose()
        summary = self.summary()
        if self.config.summary_path:
            self.config.summary_path.write_text(json.dumps(summary, indent=2))
        return summary

    async def _refresh_workers(self, vast: httpx.AsyncClient, now: datetime) -> None:
        listed = await running_instances(vast)
        if listed is None:
            return  # unknown: keep the workers we had rather than pretend every machine vanished
        factors = await throughput_factors(vast)
        up = workers_up(listed, self.running_since, now, self.config.worker_boot_s, factors)
        # the onstart suite runs at container start: as soon as vast says running, before the worker is up,
        # with the environment the instance was created with (its own report token among it)
        created_env = {int(row["id"]): dict(row.get("extra_env") or []) for row in listed}
        for instance_id in self.running_since:
            if instance_id not in self.reported and self.suites is not None:
                self.reported.add(instance_id)
                self.suites.start(instance_id, created_env.get(instance_id, {}))
        self.world.set_workers(up)

    async def _publish(self, js: Any, steps: list[TaskStep]) -> None:
        stream = DEMAND.name(self.settings.subjects)
        for batch_start in range(0, len(steps), 500):
            batch = [to_event(step) for step in steps[batch_start : batch_start + 500]]
            await asyncio.gather(
                *(publish_with_retry(js, self.settings.subjects.task(e.kind), e, stream) for e in batch)
            )

    async def _publish_queue(self, js: Any, now: datetime) -> None:
        snapshot = QueueSnapshot(
            occurred_at=now,
            source=SOURCE,
            queues=[QueueDepth(task_type=TASK_TYPE, pending=self.world.pending, running=self.world.running)],
        )
        await publish_with_retry(js, self.settings.subjects.queue, snapshot, DEMAND.name(self.settings.subjects))

    def summary(self) -> dict[str, Any]:
        waits_min = sorted(w / 60 for w in self.world.waits_s)

        def percentile(q: float) -> float:
            if not waits_min:
                return 0.0
            return round(waits_min[min(len(waits_min) - 1, math.ceil(q * len(waits_min)) - 1)], 2)

        return {
            "tasks_submitted": self.world.submitted,
            "tasks_completed": self.world.completed,
            "tasks_pending": self.world.pending,
            "wait_p50_min": percentile(0.50),
            "wait_p95_min": percentile(0.95),
            "wait_max_min": round(waits_min[-1], 2) if waits_min else 0.0,
        }
