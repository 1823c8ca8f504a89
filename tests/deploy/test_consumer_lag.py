"""The consumer-lag gauges the lag alert reads: found from a service's own subscribers, read from a real
JetStream, and absent (not zero) when the read fails."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import httpx
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from prometheus_client import CollectorRegistry

from services.demand.app import build as build_demand
from shared.bus import unread_after
from shared.consumer_lag import DurableConsumer, durable_consumers, report_consumer_lag
from shared.metrics import BusMetrics
from shared.processes import free_port, stop_process
from shared.service import ServiceContext
from shared.settings import Settings
from shared.streams import DEMAND
from sim.infra import NatsServer, RedisServer
from tests.cli.conftest import FLEETPILOT, cli_environment

# a bound on the wait for the service to start and report, not a speed requirement
GUARD_S = 60.0


def gauge(metrics: BusMetrics, name: str, stream: str, consumer: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"stream": stream, "consumer": consumer})


def test_a_service_reports_the_durables_it_pulls_from(settings: Settings) -> None:
    ctx = ServiceContext.from_settings("demand", settings)
    build_demand(ctx)
    consumers = durable_consumers(ctx.broker)
    stream = DEMAND.name(settings.subjects)
    assert DurableConsumer(stream, "demand-queue") in consumers
    assert len(set(consumers)) == len(consumers)


async def test_pending_messages_are_read_from_jetstream_and_unknown_after_a_failed_read(
    settings: Settings, js: JetStreamContext, nats_server: NatsServer
) -> None:
    stream = DEMAND.name(settings.subjects)
    await js.add_consumer(
        stream,
        ConsumerConfig(durable_name="lag-probe", ack_policy=AckPolicy.EXPLICIT, filter_subject=settings.subjects.queue),
    )
    for n in range(3):
        await js.publish(settings.subjects.queue, f"queue snapshot {n}".encode(), stream=stream)
    metrics = BusMetrics("demand", CollectorRegistry())
    consumer = DurableConsumer(stream, "lag-probe")

    await report_consumer_lag(js, [consumer], metrics)
    assert gauge(metrics, "fleetpilot_consumer_pending_messages", stream, "lag-probe") == 3
    assert gauge(metrics, "fleetpilot_consumer_ack_pending_messages", stream, "lag-probe") == 0

    [message] = await (await js.pull_subscribe_bind("lag-probe", stream)).fetch(1)
    await report_consumer_lag(js, [consumer], metrics)
    assert gauge(metrics, "fleetpilot_consumer_pending_messages", stream, "lag-probe") == 2
    assert gauge(metrics, "fleetpilot_consumer_ack_pending_messages", stream, "lag-probe") == 1
    await message.ack()

    await js.delete_consumer(stream, "lag-probe")
    await report_consumer_lag(js, [consumer], metrics)
    assert gauge(metrics, "fleetpilot_consumer_pending_messages", stream, "lag-probe") is None
    assert gauge(metrics, "fleetpilot_consumer_ack_pending_messages", stream, "lag-probe") is None
    assert gauge(metrics, "fleetpilot_consumer_info_failures_total", stream, "lag-probe") == 1


async def test_a_message_says_how_many_wait_behind_it_and_a_core_nats_one_says_none(
    settings: Settings, js: JetStreamContext, nc: NatsClient
) -> None:
    """What fleet reads to know it is behind on task events (services/fleet/core.py, `behind_on_tasks`)."""
    stream = DEMAND.name(settings.subjects)
    queue = settings.subjects.queue
    probe = ConsumerConfig(durable_name="behind-probe", ack_policy=AckPolicy.EXPLICIT, filter_subject=queue)
    await js.add_consumer(stream, probe)
    for n in range(4):
        await js.publish(queue, f"queue snapshot {n}".encode(), stream=stream)
    subscription = await js.pull_subscribe_bind("behind-probe", stream)
    [first] = await subscription.fetch(1)
    assert unread_after(first) == 3
    rest = await subscription.fetch(3)
    assert [unread_after(message) for message in rest] == [2, 1, 0]
    for message in [first, *rest]:
        await message.ack()
    core = await nc.subscribe("core.probe")
    await nc.publish("core.probe", b"no metadata")
    assert unread_after(await core.next_msg(timeout=5)) == 0
    await js.delete_consumer(stream, "behind-probe")


def test_a_running_service_exports_its_consumers_backlog(
    settings: Settings, js: JetStreamContext, redis_server: RedisServer, tmp_path: Path
) -> None:
    """`fleetpilot run demand` on a real nats-server: its /metrics carries a backlog gauge per durable it pulls."""
    port = free_port()
    env = cli_environment(
        FLEETPILOT_NATS_URL=settings.nats_url,
        FLEETPILOT_REDIS_URL=redis_server.url,
        FLEETPILOT_HTTP_HOST="127.0.0.1",
        FLEETPILOT_HTTP_PORT=str(port),
        FLEETPILOT_SUBJECT_PREFIX=settings.subject_prefix,
    )
    log_path = tmp_path / "demand.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(FLEETPILOT), "run", "demand"], env=env, cwd=tmp_path, stdout=log, stderr=log)
    stream = DEMAND.name(settings.subjects)
    wanted = f'fleetpilot_consumer_pending_messages{{consumer="demand-queue",stream="{stream}"}}'
    try:
        deadline = time.monotonic() + GUARD_S
        exported = ""
        while wanted not in exported and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
            with contextlib.suppress(httpx.HTTPError):
                exported = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0).text
    finally:
        stop_process(process)
    assert wanted in exported, log_path.read_text(errors="replace")[-2000:]
