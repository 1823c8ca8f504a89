"""A small pipelined job system that writes the task events a real one would, to feed demand's core.

One worker runs `slots` tasks at a time, each `task_s` long: 8 × 240 s gives one completion every 30 s,
120 tasks/h, as in DESIGN.md. A dead worker stops completing and taking tasks (it goes silent).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.contract import QueueDepth, QueueSnapshot, TaskEvent


@dataclass
class Worker:
    worker_id: str
    slots: int = 8
    task_s: float = 240.0
    gpu_model: str | None = None
    instance_id: int | None = None
    alive: bool = True
    running: int = 0


@dataclass
class Jobs:
    now: datetime
    workers: dict[str, Worker] = field(default_factory=dict)
    queue: deque[str] = field(default_factory=deque)
    task_type: str = "prove"
    _finishing: list[tuple[datetime, int, str, str]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _arrival_debt: float = 0.0

    def add_worker(self, worker_id: str, **kwargs: object) -> Worker:
        worker = Worker(worker_id, **kwargs)  # type: ignore[arg-type]
        self.workers[worker_id] = worker
        return worker

    def submit(self, count: int, at: datetime) -> list[TaskEvent]:
        events = []
        for _ in range(count):
            task_id = f"task-{next(self._ids)}"
            self.queue.append(task_id)
            events.append(self._event("submitted", task_id, at))
        return events

    def step(self, step_s: float, arrivals_per_h: float) -> list[TaskEvent]:
        """Advance by `step_s`, writing events in time order: completions, arrivals, then starts on free slots."""
        self.now += timedelta(seconds=step_s)
        events: list[TaskEvent] = []
        while self._finishing and self._finishing[0][0] <= self.now:
            done_at, _, task_id, worker_id = heapq.heappop(self._finishing)
            worker = self.workers[worker_id]
            if not worker.alive:
                continue  # a dead worker's tasks never finish
            worker.running -= 1
            events.append(self._event("completed", task_id, done_at, worker, duration_s=worker.task_s))
        self._arrival_debt += arrivals_per_h * step_s / 3600
        count = int(self._arrival_debt + 1e-9)
        self._arrival_debt -= count
        events += self.submit(count, self.now)
        for worker in self.workers.values():
            while worker.alive and worker.running < worker.slots and self.queue:
                task_id = self.queue.popleft()
                worker.running += 1
                done_at = self.now + timedelta(seconds=worker.task_s)
                heapq.heappush(self._finishing, (done_at, next(self._ids), task_id, worker.worker_id))
                events.append(self._event("started", task_id, self.now, worker))
        return events

    def snapshot(self) -> QueueSnapshot:
        running = sum(w.running for w in self.workers.values())
        return QueueSnapshot(
            occurred_at=self.now,
            source="jobs",
            queues=[QueueDepth(task_type=self.task_type, pending=len(self.queue), running=running)],
        )

    def _event(
        self, kind: str, task_id: str, at: datetime, worker: Worker | None = None, duration_s: float | None = None
    ) -> TaskEvent:
        return TaskEvent(
            occurred_at=at,
            source="jobs",
            kind=kind,  # type: ignore[arg-type]
            task_id=task_id,
            task_type=self.task_type,
            worker_id=worker.worker_id if worker else None,
            instance_id=worker.instance_id if worker else None,
            gpu_model=worker.gpu_model if worker else None,
            duration_s=duration_s,
        )


def run(
    jobs: Jobs,
    minutes: float,
    arrivals_per_h: float,
    feed: Callable[[list[TaskEvent], QueueSnapshot | None, datetime], None],
    *,
    step_s: float = 30.0,
) -> None:
    """Step the job system for `minutes`, handing each step's events (and a queue snapshot each minute) on."""
    steps = round(minutes * 60 / step_s)
    per_minute = max(1, round(60 / step_s))
    for i in range(steps):
        events = jobs.step(step_s, arrivals_per_h)
        snapshot = jobs.snapshot() if (i + 1) % per_minute == 0 else None
        feed(events, snapshot, jobs.now)
