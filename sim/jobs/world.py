"""The job system's pure core: a queue, and workers that each run a few tasks at once (pipelined).

A proving task takes ~4 min of one machine; pipelined, one machine finishes one every ~30 s, i.e. it runs
~8 tasks at a time. Workers and tasks are plain data; `advance(now)` returns the task steps that happened.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

TASK_DURATION_S = 240.0  # ~4 min per proving task on a reference machine
REFERENCE_TASKS_PER_H = 120.0  # one task every ~30 s when pipelined

StepKind = Literal["submitted", "started", "completed"]


@dataclass(frozen=True)
class TaskStep:
    kind: StepKind
    task_id: str
    at: datetime
    worker_id: str | None = None
    instance_id: int | None = None
    gpu_model: str | None = None
    duration_s: float | None = None


@dataclass
class Worker:
    instance_id: int
    gpu_model: str
    tasks_per_h: float
    running: int = 0
    retired: bool = False

    @property
    def worker_id(self) -> str:
        return f"worker-{self.instance_id}"

    @property
    def slots(self) -> int:
        """Concurrent tasks: throughput × duration (Little's law), at least one."""
        return max(1, round(self.tasks_per_h * self.task_duration_s / 3600))

    @property
    def task_duration_s(self) -> float:
        # a slower machine takes longer per task at the same pipelining depth
        return TASK_DURATION_S * REFERENCE_TASKS_PER_H / max(self.tasks_per_h, 1e-9)


@dataclass
class JobWorld:
    queue: deque[tuple[str, datetime]] = field(default_factory=deque)
    workers: dict[int, Worker] = field(default_factory=dict)
    _finishing: list[tuple[datetime, int, str, int, float]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    submitted: int = 0
    completed: int = 0
    waits_s: list[float] = field(default_factory=list)

    def submit(self, count: int, at: datetime) -> list[TaskStep]:
        steps = []
        for _ in range(count):
            task_id = f"task-{next(self._ids)}"
            self.queue.append((task_id, at))
            steps.append(TaskStep("submitted", task_id, at))
        self.submitted += count
        return steps

    def set_workers(self, available: dict[int, tuple[str, float]]) -> None:
        """The instances whose worker is up now: instance id → (gpu model, tasks/h). Others stop taking tasks."""
        for instance_id, worker in self.workers.items():
            worker.retired = instance_id not in available
        for instance_id, (gpu_model, tasks_per_h) in available.items():
            if instance_id not in self.workers:
                self.workers[instance_id] = Worker(instance_id, gpu_model, tasks_per_h)
            else:
                self.workers[instance_id].retired = False

    def advance(self, now: datetime) -> list[TaskStep]:
        steps: list[TaskStep] = []
        while self._finishing and self._finishing[0][0] <= now:
            done_at, _, task_id, instance_id, duration_s = heapq.heappop(self._finishing)
            worker = self.workers[instance_id]
            worker.running -= 1
            if worker.retired:
                # the machine went away mid-task: the job system re-queues it
                self.queue.appendleft((task_id, done_at))
                continue
            self.completed += 1
            steps.append(
                TaskStep("completed", task_id, done_at, worker.worker_id, instance_id, worker.gpu_model, duration_s)
            )
        for worker in self.workers.values():
            while not worker.retired and worker.running < worker.slots and self.queue:
                task_id, submitted_at = self.queue.popleft()
                worker.running += 1
                self.waits_s.append((now - submitted_at).total_seconds())
                duration_s = worker.task_duration_s
                heapq.heappush(
                    self._finishing,
                    (now + timedelta(seconds=duration_s), next(self._ids), task_id, worker.instance_id, duration_s),
                )
                steps.append(TaskStep("started", task_id, now, worker.worker_id, worker.instance_id, worker.gpu_model))
        return steps

    @property
    def pending(self) -> int:
        return len(self.queue)

    @property
    def running(self) -> int:
        return sum(w.running for w in self.workers.values())
