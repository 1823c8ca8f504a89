"""JetStream consumer lag as a Prometheus gauge: each service reports the durables it consumes from.

nats-server's monitoring endpoint speaks JSON, not the Prometheus text format, and no exporter for it ships
with the project's packages, so the consumers report their own backlog (`fleetpilot_consumer_pending_messages`),
read from JetStream's consumer info. A failed read removes the series: an unknown backlog is not an empty one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from faststream.nats import NatsBroker
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from shared.metrics import BusMetrics

# One read per durable every Prometheus scrape interval (15 s in deploy/prometheus); wall time on purpose:
# Prometheus scrapes in wall time whatever the simulated clock's speed.
CONSUMER_LAG_POLL_S = 15.0
CONSUMER_INFO_TIMEOUT_S = 5.0

log = logging.getLogger("fleetpilot.consumer_lag")


@dataclass(frozen=True)
class DurableConsumer:
    stream: str
    durable: str


def durable_consumers(broker: NatsBroker) -> list[DurableConsumer]:
    """The durable JetStream consumers the broker's subscribers pull from, each once."""
    found: dict[tuple[str, str], DurableConsumer] = {}
    for subscriber in broker.subscribers:
        stream = getattr(getattr(subscriber, "stream", None), "name", None)
        durable = getattr(getattr(subscriber, "config", None), "durable_name", None)
        if stream and durable:
            found[(stream, durable)] = DurableConsumer(stream, durable)
    return list(found.values())


async def report_consumer_lag(js: JetStreamContext, consumers: Iterable[DurableConsumer], metrics: BusMetrics) -> None:
    """One reading per consumer: messages not yet delivered, and delivered but not yet acknowledged."""
    for consumer in consumers:
        labels = (consumer.stream, consumer.durable)
        try:
            info = await js.consumer_info(consumer.stream, consumer.durable, timeout=CONSUMER_INFO_TIMEOUT_S)
        except (NatsError, TimeoutError) as error:
            metrics.consumer_info_failures.labels(*labels).inc()
            log.warning("consumer info for %s/%s failed: %r", *labels, error)
            info = None
        for gauge, value in (
            (metrics.consumer_pending, info and info.num_pending),
            (metrics.consumer_ack_pending, info and info.num_ack_pending),
        ):
            if value is None:
                with contextlib.suppress(KeyError):  # never reported yet
                    gauge.remove(*labels)
            else:
                gauge.labels(*labels).set(value)


async def poll_consumer_lag(broker: NatsBroker, metrics: BusMetrics, every_s: float = CONSUMER_LAG_POLL_S) -> None:
    """Until cancelled: the service's consumers' lag, read every `every_s` seconds."""
    consumers = durable_consumers(broker)
    if not consumers:
        return
    js = broker.config.connection_state.stream
    while True:
        await report_consumer_lag(js, consumers, metrics)
        await asyncio.sleep(every_s)
