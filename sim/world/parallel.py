"""Independent evaluations side by side: a process pool by default, Ray when asked for, in order either way.

Every evaluation is a pure function of its arguments (the trace, the scenario and its seed fix every draw), so
where it runs changes its timings and nothing else: results come back in the order of the jobs, equal to a
serial run's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Literal, TypeVar

Result = TypeVar("Result")
Backend = Literal["process", "ray"]
BACKENDS: tuple[Backend, ...] = ("process", "ray")
# told the caller as each job ends, in the order they end: (job index, seconds from submission to the end)
Progress = Callable[[int, float], None]


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run here (Ray not installed): one line for the user, no traceback."""


def default_workers() -> int:
    return os.cpu_count() or 1


def run_all(
    function: Callable[..., Result],
    jobs: Sequence[tuple[Any, ...]],
    workers: int | None = None,
    backend: Backend = "process",
    progress: Progress | None = None,
) -> list[Result]:
    """`function(*job)` for every job, at most `workers` at a time (None: one per CPU; 1: in this process)."""
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers={workers}: at least 1")
    if backend == "ray":
        return _on_ray(function, jobs, workers, progress)
    if backend != "process":
        raise ValueError(f"backend={backend!r}: choose one of {', '.join(BACKENDS)}")
    if workers == 1 or len(jobs) <= 1:
        return _serial(function, jobs, progress)
    return _on_process_pool(function, jobs, workers, progress)


def _serial(
    function: Callable[..., Result], jobs: Sequence[tuple[Any, ...]], progress: Progress | None
) -> list[Result]:
    results = []
    for index, job in enumerate(jobs):
        started = time.perf_counter()
        results.append(function(*job))
        if progress:
            progress(index, time.perf_counter() - started)
    return results


def _on_process_pool(
    function: Callable[..., Result], jobs: Sequence[tuple[Any, ...]], workers: int, progress: Progress | None
) -> list[Result]:
    started = time.perf_counter()
    results: dict[int, Result] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        futures = {pool.submit(function, *job): index for index, job in enumerate(jobs)}
        for future in as_completed(futures):
            index = futures[future]
            results[index] = future.result()
            if progress:
                progress(index, time.perf_counter() - started)
    return [results[index] for index in range(len(jobs))]


def _on_ray(
    function: Callable[..., Result], jobs: Sequence[tuple[Any, ...]], workers: int, progress: Progress | None
) -> list[Result]:
    try:
        import ray  # an optional extra (`pip install 'fleetpilot[ray]'`): imported only when chosen
    except ImportError:
        raise BackendUnavailable(
            "--backend ray: ray is not installed (pip install 'fleetpilot[ray]'); the default process pool needs"
            " nothing"
        ) from None
    started = time.perf_counter()
    ray.init(num_cpus=workers, ignore_reinit_error=True, include_dashboard=False)
    remote = ray.remote(function)
    pending = {remote.remote(*job): index for index, job in enumerate(jobs)}
    results: dict[int, Result] = {}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        index = pending.pop(done[0])
        results[index] = ray.get(done[0])
        if progress:
            progress(index, time.perf_counter() - started)
    return [results[index] for index in range(len(jobs))]
