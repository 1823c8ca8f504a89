"""`python -m benchmarks.demand`: the demand service ingesting a million task events through real NATS.

Measures the service's ingest rate and its peak RSS (the service runs as its own process, `fleetpilot run
demand`), beside the physical reference on the same stream, in the same run: a bare nats-py JetStream pull
consumer that acknowledges each message and does nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from benchmarks.common import write_result
from shared.contract import TaskEvent
from shared.processes import free_port
from shared.settings import Settings
from shared.streams import DEMAND, ensure_streams
from sim.infra import NatsServer, RedisServer

NAME = "demand"
DEFAULT_EVENTS = 1_000_000
WORKERS = 200
GPU_MODELS = ("RTX 4090", "RTX 5090", "RTX 3090")
PUBLISH_FLUSH_EVERY = 20_000
BATCH = 500
POLL_S = 0.1


def task_events(count: int, end: datetime) -> list[tuple[str, bytes]]:
    """(subject kind, payload) for `count` events: each task submitted, started, completed, spread over 5 h."""
    tasks = (count + 2) // 3
    span_s = 5 * 3600
    out: list[tuple[str, bytes]] = []
    start = end - timedelta(seconds=span_s)
    for i in range(tasks):
        submitted_at = start + timedelta(seconds=span_s * i / tasks)
        worker = i % WORKERS
        common = {"source": "bench-jobs", "task_id": f"task-{i}", "task_type": "prove"}
        steps: list[tuple[str, dict[str, Any]]] = [
            ("submitted", {"occurred_at": submitted_at}),
            ("started", {"occurred_at": submitted_at, "worker_id": f"worker-{worker}", "instance_id": worker}),
            (
                "completed",
                {
                    "occurred_at": submitted_at + timedelta(seconds=1),
                    "worker_id": f"worker-{worker}",
                    "instance_id": worker,
                    "gpu_model": GPU_MODELS[worker % len(GPU_MODELS)],
                    "duration_s": 240.0,
                },
            ),
        ]
        for kind, fields in steps:
            if len(out) == count:
                return out
            event = TaskEvent(kind=kind, **common, **fields)  # type: ignore[arg-type]
            out.append((kind, event.model_dump_json().encode()))
    return out


async def publish_all(js: JetStreamContext, nc: Any, settings: Settings, payloads: list[tuple[str, bytes]]) -> float:
    """Publish on core NATS into the stream's subjects (JetStream stores them); returns events/s."""
    subjects = settings.subjects
    stream = DEMAND.name(subjects)
    started = time.perf_counter()
    for i, (kind, payload) in enumerate(payloads, start=1):
        await nc.publish(subjects.task(kind), payload)  # type: ignore[arg-type]
        if i % PUBLISH_FLUSH_EVERY == 0:
            await nc.flush()
            # let the server persist before piling on more (core publishes are not acknowledged)
            await stream_holds(js, stream, i - 2 * PUBLISH_FLUSH_EVERY)
    await nc.flush()
    await stream_holds(js, stream, len(payloads))
    return len(payloads) / (time.perf_counter() - started)


async def stream_holds(js: JetStreamContext, stream: str, count: int) -> None:
    while True:
        if (await js.stream_info(stream)).state.messages >= count:
            return
        await asyncio.sleep(0.01)


async def bare_consumer(js: JetStreamContext, settings: Settings, total: int) -> float:
    """The reference: pull in batches and ack every message, nothing else."""
    subjects = settings.subjects
    sub = await js.pull_subscribe(subjects.tasks_all, durable="bench-bare", stream=DEMAND.name(subjects))
    seen = 0
    started: float | None = None
    while seen < total:
        try:
            messages = await sub.fetch(BATCH, timeout=1.0)
        except TimeoutError:
            continue
        if started is None:
            started = time.perf_counter()
        for msg in messages:
            await msg.ack()
        seen += len(messages)
    await sub.unsubscribe()
    assert started is not None
    return total / (time.perf_counter() - started)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


async def demand_service(js: JetStreamContext, settings: Settings, total: int) -> dict[str, Any]:
    """Run `fleetpilot run demand` as a process; time it through its durable consumer's ack floor."""
    env = dict(
        os.environ,
        FLEETPILOT_NATS_URL=settings.nats_url,
        FLEETPILOT_REDIS_URL=settings.redis_url,
        FLEETPILOT_SUBJECT_PREFIX=settings.subject_prefix,
        FLEETPILOT_HTTP_HOST="127.0.0.1",
    )
    command = [sys.executable, "-m", "services.cli.main", "run", "demand", "--port", str(free_port())]
    process = await asyncio.create_subprocess_exec(*command, "--log-level", "warning", env=env)
    stream = DEMAND.name(settings.subjects)
    started: float | None = None
    rss_at_progress: dict[str, float] = {}
    rss_samples: list[float] = []
    try:
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"the demand service exited with {process.returncode}")
            try:
                info = await js.consumer_info(stream, "demand-tasks")
            except NotFoundError:
                await asyncio.sleep(POLL_S)
                continue
            acked = info.ack_floor.stream_seq if info.ack_floor else 0
            if started is None and (info.delivered.stream_seq or 0) > 0:
                started = time.perf_counter()
            rss = rss_mb(process.pid)
            rss_samples.append(rss)
            for share in (10, 25, 50, 75, 100):
                if acked >= total * share / 100 and f"{share}%" not in rss_at_progress:
                    rss_at_progress[f"{share}%"] = round(rss, 1)
            if acked >= total:
                break
            await asyncio.sleep(POLL_S)
        assert started is not None
        elapsed_s = time.perf_counter() - started
        peak_rss = rss_mb(process.pid, "VmHWM")
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=20)
            except TimeoutError:
                process.kill()
                await process.wait()
    return {
        "events_per_s": total / elapsed_s,
        "elapsed_s": elapsed_s,
        "peak_rss_mb": peak_rss,
        "rss_mb_at_progress": rss_at_progress,
        "rss_mb_min_after_10pct": min(rss_samples[len(rss_samples) // 10 :] or [0.0]),
    }


async def run(total: int) -> dict[str, Any]:
    with NatsServer() as nats_server, RedisServer() as redis_server:
        settings = Settings(nats_url=nats_server.url, redis_url=redis_server.url, subject_prefix="fpb")
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await ensure_streams(js, settings.subjects)
        print(f"generating {total:,} task events ...", flush=True)
        payloads = task_events(total, datetime.now(UTC))
        print("publishing ...", flush=True)
        publish_rate = await publish_all(js, nc, settings, payloads)
        del payloads
        print(f"published at {publish_rate:,.0f} events/s; bare consumer ...", flush=True)
        bare_rate = await bare_consumer(js, settings, total)
        print(f"bare consumer {bare_rate:,.0f} events/s; demand service ...", flush=True)
        service = await demand_service(js, settings, total)
        await nc.close()
    return {
        "events": total,
        "events_per_s": round(service["events_per_s"], 1),
        "peak_rss_mb": round(service["peak_rss_mb"], 1),
        "raw_nats_events_per_s": round(bare_rate, 1),
        "ratio_to_raw_nats": round(service["events_per_s"] / bare_rate, 3),
        "demand_elapsed_s": round(service["elapsed_s"], 1),
        "rss_mb_at_progress": service["rss_mb_at_progress"],
        "publish_events_per_s": round(publish_rate, 1),
        "cpus": os.cpu_count(),
    }


def print_table(result: dict[str, Any]) -> None:
    rows = [
        ("events ingested", f"{result['events']:,}"),
        ("demand service, events/s", f"{result['events_per_s']:,.0f}"),
        ("bare nats-py consumer (ack each), events/s", f"{result['raw_nats_events_per_s']:,.0f}"),
        ("demand / bare", f"{result['ratio_to_raw_nats']:.2f}"),
        ("demand peak RSS, MB", f"{result['peak_rss_mb']:.1f}"),
        ("demand RSS at 10/25/50/75/100 %, MB", " / ".join(f"{v:.0f}" for v in result["rss_mb_at_progress"].values())),
        ("publish (core NATS into JetStream), events/s", f"{result['publish_events_per_s']:,.0f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="task events to publish and ingest")
    args = parser.parse_args()
    result = asyncio.run(run(args.events))
    print_table(result)
    path = write_result(NAME, result)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
