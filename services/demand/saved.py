"""demand's saved state as a versioned pydantic model: what a checkpoint holds, validated when it is read back.

Versions (the store's marker, services/demand/store.py):
- 1 and 2: the same positional JSON (lists whose meaning was their order; 2 only added the marker). Read through
  `from_positional`, which names each field, then validated like version 3.
- 3: this model, every field named, workers kept under the job system's worker ids.
- 4: workers and recent producers kept by producer (`core.producer_key`: the machine when its id was known).
  Version 3 is re-keyed on reading (`producers_keyed`); 1 and 2 are named, then re-keyed.
A field added later gets a default here and the version moves, with a migration test
(tests/cli/test_state_versions.py) for each older version.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from services.demand.config import DemandSettings
from services.demand.core import DemandCore, machine_producer, worker_producer
from services.demand.records import FleetView, PublishedMark, QueueView, WorkerRecord
from services.demand.windows import BUSY_COMPLETIONS, BUSY_S, BucketSeries
from shared.contract import DemandState, DemandTrend

SAVED_VERSION: Literal[4] = 4


class Saved(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SavedSeries(Saved):
    head: int
    cells: list[tuple[int, list[float]]]  # (bucket, its fields): the non-empty buckets the ring still holds


class SavedHistory(Saved):
    head: int
    buckets: list[tuple[int, float]]  # (season bucket, arrivals)


class SavedWorker(Saved):
    producer: str  # core.producer_key
    gpu_model: str | None
    instance_id: int | None
    last_seen_s: float
    timeline: list[tuple[float, str, str | None, bool]]  # completions: at, task type, gpu model, tasks waiting


class SavedQueue(Saved):
    at_s: float
    pending: dict[str, int]
    running: dict[str, int]
    reported_pending: dict[str, int] | None = None


class SavedFleet(Saved):
    at_s: float
    producing: int
    ready: int
    gpu_by_instance: dict[int, str]


class SavedMark(Saved):
    at_s: float
    state: DemandState
    trend: DemandTrend
    pending: int
    capacity_tasks_per_h: float


class SavedDemand(Saved):
    version: Literal[4] = SAVED_VERSION
    overall: SavedSeries
    by_type: dict[str, SavedSeries]
    by_gpu: dict[str, SavedSeries]
    workers: list[SavedWorker]  # by last activity, oldest first
    recent_producers: list[tuple[str, float]]  # by last completion, oldest first
    worker_machines: list[tuple[str, int]] = []  # the machine each worker last named, least recently named first
    types_with_started: list[str]
    queue: SavedQueue | None
    fleet: SavedFleet | None
    observing_since_s: float | None
    last_completion_s: float | None
    too_late_events: int
    pending_estimate: int
    state: DemandState | None
    trend: DemandTrend
    above_capacity_since_s: float | None
    waiting_since_s: float | None
    last_published: SavedMark | None
    signal_seq: int
    history: SavedHistory | None  # None: saved before the seasonal echo existed; it builds up again
    history_since_s: float | None


def saved_of(core: DemandCore) -> SavedDemand:
    queue, fleet, mark = core.queue, core.fleet, core.last_published
    return SavedDemand(
        overall=_series(core.overall),
        by_type={name: _series(s) for name, s in core.by_type.items()},
        by_gpu={name: _series(s) for name, s in core.by_gpu.items()},
        workers=[
            SavedWorker(
                producer=producer,
                gpu_model=w.gpu_model,
                instance_id=w.instance_id,
                last_seen_s=w.last_seen_s,
                timeline=list(w.timeline),
            )
            for producer, w in core.workers.items()
        ],
        recent_producers=list(core.recent_producers.items()),
        worker_machines=list(core.worker_machines.items()),
        types_with_started=sorted(core.types_with_started),
        queue=None
        if queue is None
        else SavedQueue(
            at_s=queue.at_s, pending=queue.pending, running=queue.running, reported_pending=queue.reported_pending
        ),
        fleet=None
        if fleet is None
        else SavedFleet(
            at_s=fleet.at_s, producing=fleet.producing, ready=fleet.ready, gpu_by_instance=fleet.gpu_by_instance
        ),
        observing_since_s=core.observing_since_s,
        last_completion_s=core.last_completion_s,
        too_late_events=core.too_late_events,
        pending_estimate=core.pending_estimate,
        state=core.state,
        trend=core.trend,
        above_capacity_since_s=core.above_capacity_since_s,
        waiting_since_s=core.waiting_since_s,
        last_published=None
        if mark is None
        else SavedMark(
            at_s=mark.at_s,
            state=mark.state,
            trend=mark.trend,
            pending=mark.pending,
            capacity_tasks_per_h=mark.capacity_tasks_per_h,
        ),
        signal_seq=core.signal_seq,
        history=SavedHistory.model_validate(core.history.to_state()),
        history_since_s=core.history_since_s,
    )


def restored(saved: SavedDemand, config: DemandSettings | None = None, seen_ids: Iterable[str] = ()) -> DemandCore:
    core = DemandCore(config)
    windows = core.window_buckets

    def series(s: SavedSeries) -> BucketSeries:
        return BucketSeries.from_state(windows, s.model_dump())

    core.overall = series(saved.overall)
    core.by_type = {name: series(s) for name, s in saved.by_type.items()}
    core.by_gpu = {name: series(s) for name, s in saved.by_gpu.items()}
    # each kept within the bound of the settings it comes back under, the most recent kept
    kept = core.config.max_producers
    for w in saved.workers[-kept:]:
        core.workers[w.producer] = WorkerRecord(list(w.timeline), w.gpu_model, w.instance_id, w.last_seen_s)
    core.recent_producers = OrderedDict(sorted(saved.recent_producers, key=lambda item: item[1])[-kept:])
    core.worker_machines = OrderedDict(saved.worker_machines[-kept:])
    core.types_with_started = set(saved.types_with_started)
    if (queue := saved.queue) is not None:
        core.queue = QueueView(queue.at_s, dict(queue.pending), dict(queue.running), queue.reported_pending)
    if (fleet := saved.fleet) is not None:
        core.fleet = FleetView(fleet.at_s, fleet.producing, fleet.ready, dict(fleet.gpu_by_instance))
    core.observing_since_s = saved.observing_since_s
    core.last_completion_s = saved.last_completion_s
    core.too_late_events = saved.too_late_events
    core.pending_estimate = saved.pending_estimate
    core.state = saved.state
    core.trend = saved.trend
    core.above_capacity_since_s = saved.above_capacity_since_s
    core.waiting_since_s = saved.waiting_since_s
    if (mark := saved.last_published) is not None:
        core.last_published = PublishedMark(mark.at_s, mark.state, mark.trend, mark.pending, mark.capacity_tasks_per_h)
    core.signal_seq = saved.signal_seq
    if saved.history is not None:
        core.history.load_state(saved.history.model_dump())
        core.history_since_s = saved.history_since_s
    core.seen.load(seen_ids)
    return core


def _series(series: BucketSeries) -> SavedSeries:
    return SavedSeries.model_validate(series.to_state())


def producers_keyed(state: dict[str, Any]) -> SavedDemand:
    """Version 3 (or 1 and 2, once named) as version 4, every worker re-keyed to its producer
    (`core.producer_key`): left under their old names, a machine's workers would count beside its new key for a
    short window after the upgrade, capacity twice over, the verdict that gives machines back.

    - the workers: of several on one machine the one seen last is kept (its timeline goes on), and each
      worker's machine is remembered (`worker_machines`) for its events that do not name it;
    - the recent producers: each machine at the latest completion of its workers;
    - the busy time in the windows, when some machine had several workers: it was measured per worker, so a
      machine's pace would read as one worker's for the hour it stays in them (eight processes: an eighth,
      and a served fleet under-provisioned). It is dropped, to be measured again by machine within minutes;
      until then the pace is the default's."""
    renamed: dict[str, str] = {}
    machines: dict[str, int] = {}
    workers: dict[str, dict[str, Any]] = {}
    names: Counter[str] = Counter()
    for worker in sorted(state["workers"], key=lambda w: w["last_seen_s"]):  # oldest first
        worker_id, instance_id = worker["worker_id"], worker["instance_id"]
        producer = machine_producer(instance_id) if instance_id is not None else worker_producer(worker_id)
        renamed[worker_id] = producer
        names[producer] += 1
        if instance_id is not None:
            machines[worker_id] = instance_id
        workers.pop(producer, None)  # kept in the order of its latest worker
        workers[producer] = {key: value for key, value in worker.items() if key != "worker_id"} | {"producer": producer}
    latest: dict[str, float] = {}
    for worker_id, at_s in state["recent_producers"]:
        producer = renamed.get(worker_id) or worker_producer(worker_id)
        latest[producer] = max(at_s, latest.get(producer, at_s))
    keyed = state | {
        "version": SAVED_VERSION,
        "workers": list(workers.values()),
        "recent_producers": sorted(latest.items(), key=lambda item: item[1]),
        "worker_machines": list(machines.items()),
    }
    if any(count > 1 for count in names.values()):
        keyed |= {
            "overall": _without_busy_time(state["overall"]),
            "by_type": {name: _without_busy_time(series) for name, series in state["by_type"].items()},
            "by_gpu": {name: _without_busy_time(series) for name, series in state["by_gpu"].items()},
        }
    return SavedDemand.model_validate(keyed)


def _without_busy_time(series: dict[str, Any]) -> dict[str, Any]:
    cells = [[bucket, [0 if i in (BUSY_COMPLETIONS, BUSY_S) else v for i, v in enumerate(values)]]
             for bucket, values in series["cells"]]  # fmt: skip
    return series | {"cells": cells}


def from_positional(state: dict[str, Any]) -> SavedDemand:
    """Versions 1 and 2: each positional list named as version 3 named it, then re-keyed (`producers_keyed`)."""
    queue, fleet, mark = state["queue"], state["fleet"], state["last_published"]
    named: dict[str, Any] = {key: value for key, value in state.items() if key in SavedDemand.model_fields}
    named["workers"] = [
        {"worker_id": wid, "gpu_model": gpu, "instance_id": instance_id, "last_seen_s": seen, "timeline": timeline}
        for wid, gpu, instance_id, seen, timeline in state["workers"]
    ]
    if queue is not None:
        at_s, pending, running, *reported = queue  # a checkpoint from before the rise check has no reported part
        named["queue"] = {
            "at_s": at_s,
            "pending": pending,
            "running": running,
            "reported_pending": reported[0] if reported else None,
        }
    if fleet is not None:
        at_s, producing, ready, gpus = fleet
        named["fleet"] = {"at_s": at_s, "producing": producing, "ready": ready, "gpu_by_instance": dict(gpus)}
    if mark is not None:
        at_s, demand_state, trend, pending, capacity = mark
        named["last_published"] = {
            "at_s": at_s,
            "state": demand_state,
            "trend": trend,
            "pending": pending,
            "capacity_tasks_per_h": capacity,
        }
    named.setdefault("history", None)  # saved before the seasonal echo existed
    named.setdefault("history_since_s", None)
    return producers_keyed(named)
