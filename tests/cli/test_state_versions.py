"""Saved state survives an upgrade: each service restores every older version it knows (state_v1/ holds what
version 1, the unversioned shape, wrote: taken from a real run), and drops a version it does not know, to be
rebuilt from the bus and vast.ai, saying so."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis

from services.demand.config import DemandSettings
from services.demand.core import DemandCore
from services.demand.saved import restored, saved_of
from services.demand.store import DemandStore
from services.fleet.config import FleetSettings
from services.fleet.saved import meta_of, restored_core
from services.fleet.store import FleetStore
from services.provisioner.store import ProvisionerStore
from shared.contract import DemandState, InstanceState, ProvisionResult, TaskEvent
from shared.state_version import marker
from sim.infra import RedisServer

V1 = Path(__file__).parent / "state_v1"
NAMESPACE = "fp"


def version_1(service: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((V1 / f"{service}.json").read_text())
    return data


def unknown_marker(service: str) -> str:
    """What a newer release would write."""
    return marker(service, 99)


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def write_fleet_v1(redis: Redis) -> dict[str, Any]:
    saved = version_1("fleet")
    mapping = {str(r["instance_id"]): json.dumps(r) for r in saved["instances"]}
    await redis.hset(f"fleetpilot:{NAMESPACE}:fleet:instances", mapping=mapping)  # type: ignore[misc]
    await redis.set(f"fleetpilot:{NAMESPACE}:fleet:meta", json.dumps(saved["meta"]))
    return saved


@pytest.mark.parametrize("version_marker", [None, marker("fleet", 2)], ids=["version 1", "version 2"])
async def test_fleet_restores_the_positional_versions_and_rewrites_them_as_version_3(
    redis: Redis, redis_server: RedisServer, version_marker: str | None
) -> None:
    saved = await write_fleet_v1(redis)  # version 2 saved the same positional records, beside a marker
    store = FleetStore(redis_server.url, NAMESPACE)
    if version_marker is not None:
        await redis.set(store.version_key, version_marker)
    records, meta = await store.load()
    # migrated whole at once: a later save writes only changed records, and none may stay positional
    assert json.loads(await redis.get(store.version_key)) == {"service": "fleet", "version": 3}
    assert await store.load() == (records, meta)
    core = restored_core(records, meta, datetime(2026, 3, 2, 1, 0, tzinfo=UTC), FleetSettings())
    [instance] = core.instances.values()
    old = saved["instances"][0]
    assert instance.instance_id == old["instance_id"] and instance.state is InstanceState.LOADING
    assert (instance.gpu_model, instance.host_id, instance.label) == ("RTX 5090", 90041, old["label"])
    assert [(e.from_state, e.to_state) for e in instance.history] == [
        (None, InstanceState.REQUESTED),
        (InstanceState.REQUESTED, InstanceState.LOADING),
    ]
    assert (instance.window_start_s, instance.window_count) == (0.0, 0) and instance.first_producing_s is None
    assert meta is not None and meta.queue_pending == 40 and meta.bids == {}
    await store.save([], [], meta_of(core))
    assert await store.load() == (records, meta_of(core))
    await store.close()


async def test_fleet_drops_a_version_it_does_not_know(
    redis: Redis, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    await write_fleet_v1(redis)
    store = FleetStore(redis_server.url, NAMESPACE)
    await redis.set(store.version_key, unknown_marker("fleet"))
    assert await store.load() == ([], None)
    assert "fleet: saved state has version 99" in caplog.text and "rebuilding" in caplog.text
    assert not await redis.exists(store.instances_key, store.meta_key)
    await store.close()


@pytest.mark.parametrize("version_marker", [None, marker("demand", 2)], ids=["version 1", "version 2"])
async def test_demand_restores_the_positional_versions_and_saves_version_4(
    redis: Redis, redis_server: RedisServer, version_marker: str | None
) -> None:
    saved = version_1("demand")  # version 2 saved the same positional lists, beside a marker
    store = DemandStore(redis_server.url, NAMESPACE, seen_capacity=1000)
    await redis.set(store.state_key, json.dumps(saved["state"]))
    await redis.rpush(store.seen_key, *saved["seen_event_ids"])  # type: ignore[misc]
    if version_marker is not None:
        await redis.set(store.version_key, version_marker)
    state, seen = await store.load()
    assert state is not None and seen == saved["seen_event_ids"]
    core = restored(state, DemandSettings(), seen)
    # each positional value in its named place (the real run's checkpoint: one RTX 5090 loading, 40 queued)
    assert core.signal_seq == 61 and core.pending_estimate == 40
    assert core.queue is not None and core.queue.pending == {"default": 40} and core.queue.running == {"default": 0}
    assert core.fleet is not None and core.fleet.gpu_by_instance == {33032701: "RTX 5090"}
    assert core.last_published is not None and core.last_published.state is DemandState.UNDER_PROVISIONED
    assert core.state is DemandState.UNDER_PROVISIONED and core.waiting_since_s == pytest.approx(1772412556.944308)
    await store.save(saved_of(core), [], "after-migration")
    assert json.loads(await redis.get(store.version_key)) == {"service": "demand", "version": 4}
    again, _ = await store.load()
    assert again == saved_of(core)  # version 4 reads back whole
    await store.close()


async def test_demand_starts_empty_on_a_version_4_state_that_does_not_validate(
    redis: Redis, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = DemandStore(redis_server.url, NAMESPACE, seen_capacity=1000)
    await redis.set(store.state_key, json.dumps({"version": 4, "overall": {"head": "soon"}}))
    await redis.set(store.version_key, marker("demand", 4))
    with pytest.raises(ValidationError):
        await store.load()  # the service's restore logs it and starts with empty windows
    await store.close()


def version_3_workers(t0: float) -> dict[str, Any]:
    """What version 3 kept of two processes of machine 7 and a worker outside the fleet, all recent producers,
    with busy time in the windows as version 3 measured it (per worker)."""
    core = DemandCore()
    state = saved_of(core).model_dump(mode="json")

    def worker(worker_id: str, instance_id: int | None, seen_s: float) -> dict[str, Any]:
        return {
            "worker_id": worker_id,
            "gpu_model": "RTX 4090",
            "instance_id": instance_id,
            "last_seen_s": t0 + seen_s,
            "timeline": [[t0 + seen_s - 30, "prove", "RTX 4090", True], [t0 + seen_s, "prove", "RTX 4090", True]],
        }

    bucket = int(t0 // core.bucket_s)
    busy = [[bucket, [0, 0, 3, 0, 720.0, 3, 2, 1920.0]]]  # two busy completions, 16 min apart: 3.75 tasks/h
    return state | {
        "version": 3,
        "overall": {"head": bucket, "cells": busy},
        "by_type": {"prove": {"head": bucket, "cells": busy}},
        "workers": [worker("m7-a", 7, 10), worker("outside", None, 15), worker("m7-b", 7, 20)],
        "recent_producers": [["m7-a", t0 + 10], ["outside", t0 + 15], ["m7-b", t0 + 20]],
    }


async def test_demand_rekeys_version_3_workers_by_machine(redis: Redis, redis_server: RedisServer) -> None:
    """Read back as two producers (machine 7, the outside worker), not three, so an upgrade does not count a
    machine under its old names and its new one at once; machine 7's busy time, measured per process, is
    dropped (its pace would read as one process's for an hour); its processes' later events count for it."""
    t0 = datetime(2026, 3, 2, 8, tzinfo=UTC).timestamp()
    store = DemandStore(redis_server.url, NAMESPACE, seen_capacity=1000)
    await redis.set(store.state_key, json.dumps(version_3_workers(t0)))
    await redis.set(store.version_key, marker("demand", 3))
    loaded, _ = await store.load()
    assert loaded is not None and loaded.version == 4
    core = restored(loaded, DemandSettings())
    assert list(core.workers) == ["worker:outside", "instance:7"]
    assert core.workers["instance:7"].last_seen_s == t0 + 20  # the machine's latest worker goes on
    assert list(core.recent_producers.items()) == [("worker:outside", t0 + 15), ("instance:7", t0 + 20)]
    assert dict(core.worker_machines) == {"m7-a": 7, "m7-b": 7}
    measured = core.measure(t0 + 60)
    assert measured.producing_workers == 2
    assert measured.per_worker_throughput_tasks_per_h is None  # measured again by machine, not read per process
    at = datetime.fromtimestamp(t0 + 70, UTC)
    later = TaskEvent(occurred_at=at, source="jobs", kind="completed", task_id="after", worker_id="m7-a")
    core.ingest(later, at)
    assert list(core.recent_producers) == ["worker:outside", "instance:7"]
    await store.save(saved_of(core), [], "after-migration")
    assert json.loads(await redis.get(store.version_key)) == {"service": "demand", "version": 4}
    assert await store.load() == (saved_of(core), [])
    await store.close()


async def test_demand_rekeys_the_positional_versions_workers_too(redis: Redis, redis_server: RedisServer) -> None:
    saved = version_1("demand")
    t0 = datetime(2026, 3, 2, 8, tzinfo=UTC).timestamp()
    timeline = [[t0 - 30, "default", "RTX 5090", True], [t0, "default", "RTX 5090", True]]
    saved["state"]["workers"] = [
        ["w-a", "RTX 5090", 33032701, t0 - 5, timeline],
        ["w-b", "RTX 5090", 33032701, t0, timeline],
    ]
    saved["state"]["recent_producers"] = [["w-a", t0 - 5], ["w-b", t0]]
    store = DemandStore(redis_server.url, NAMESPACE, seen_capacity=1000)
    await redis.set(store.state_key, json.dumps(saved["state"]))
    state, _ = await store.load()
    assert state is not None
    core = restored(state, DemandSettings())
    assert list(core.workers) == ["instance:33032701"]
    assert list(core.recent_producers.items()) == [("instance:33032701", t0)]
    await store.close()


async def test_demand_starts_empty_on_a_version_3_state_that_does_not_validate(
    redis: Redis, redis_server: RedisServer
) -> None:
    store = DemandStore(redis_server.url, NAMESPACE, seen_capacity=1000)
    await redis.set(store.version_key, marker("demand", 3))
    for broken in ({"version": 3, "overall": {"head": "soon"}}, {"version": 3, "workers": [{"worker_id": 1}]}, []):
        await redis.set(store.state_key, json.dumps(broken))
        with pytest.raises((KeyError, TypeError, ValueError)):  # what the service's restore catches and logs
            await store.load()
    await store.close()


async def test_demand_drops_a_version_it_does_not_know(
    redis: Redis, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    saved = version_1("demand")
    store = DemandStore(redis_server.url, NAMESPACE, seen_capacity=1000)
    await redis.set(store.state_key, json.dumps(saved["state"]))
    await redis.set(store.version_key, "not a marker")
    assert await store.load() == (None, [])
    assert "demand: saved state has an unreadable version marker" in caplog.text
    await store.close()


async def write_provisioner_v1(redis: Redis) -> tuple[ProvisionerStore, dict[str, Any]]:
    saved = version_1("provisioner")
    store = ProvisionerStore(redis, f"fleetpilot:{NAMESPACE}:provisioner")
    await redis.hset(  # type: ignore[misc]
        store._key("instances"), mapping={str(r["instance_id"]): json.dumps(r) for r in saved["instances"]}
    )
    await redis.set(store._key("host_history"), json.dumps(saved["host_history"]))
    await redis.hset(store._key("observed_tasks_per_h"), mapping=saved["observed_tasks_per_h"])  # type: ignore[misc]
    return store, saved


async def test_the_provisioner_restores_version_1(redis: Redis) -> None:
    store, saved = await write_provisioner_v1(redis)
    known = await store.load_instances()
    [instance] = known.values()
    assert instance.label == saved["instances"][0]["label"] and instance.state is InstanceState.LOADING
    history = await store.load_history()
    assert history.throughput_ratio(12041) == 0.93 and len(history.incidents) == 1
    assert await store.load_observed_throughput() == {"RTX 5090": 131.5}
    assert json.loads(await redis.get(store._key("version"))) == {"service": "provisioner", "version": 2}


async def test_the_provisioner_drops_what_vast_ai_rebuilds_and_keeps_its_answers(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = await write_provisioner_v1(redis)
    answered = ProvisionResult(
        occurred_at=datetime(2026, 3, 2, tzinfo=UTC), source="provisioner", idempotency_key="launch-0001",
        command="launch", outcome="done", instance_ids=[33032701],
    )  # fmt: skip
    await store.save_result(answered)
    await store.admit_fencing_token(41)
    await redis.set(store._key("version"), unknown_marker("provisioner"))
    with caplog.at_level(logging.WARNING, logger="fleetpilot.state"):
        assert await store.load_instances() == {}
    assert "provisioner: saved state has version 99" in caplog.text
    assert (await store.load_history()).incidents == [] and await store.load_observed_throughput() == {}
    # a command answered before is still answered, and an older decider is still fenced off
    assert await store.result_for("launch-0001") == answered
    assert await store.admit_fencing_token(40) == 41
