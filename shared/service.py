"""What every service process shares: settings, clock, metrics, broker, streams, and /metrics + /health over HTTP."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from faststream.asgi import AsgiFastStream, make_ping_asgi
from faststream.nats import NatsBroker
from prometheus_client import make_asgi_app

from shared.bus import build_broker
from shared.clock import Clock
from shared.metrics import BusMetrics
from shared.settings import Settings
from shared.streams import ensure_streams
from shared.subjects import Subjects


@dataclass
class ServiceContext:
    """The adapters a service is built from; tests build one around private servers and a simulated clock."""

    name: str
    settings: Settings
    clock: Clock
    metrics: BusMetrics = field(init=False)
    broker: NatsBroker = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = BusMetrics(self.name)
        self.broker = build_broker(self.settings, self.name, self.metrics, self.clock)

    @classmethod
    def from_settings(cls, name: str, settings: Settings | None = None, clock: Clock | None = None) -> ServiceContext:
        settings = settings or Settings()
        return cls(name, settings, clock or settings.make_clock())

    @property
    def subjects(self) -> Subjects:
        return self.settings.subjects

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger(f"fleetpilot.{self.name}")

    async def declare_streams(self) -> None:
        """Idempotent: every service may call it at start-up; the definitions live in shared/streams.py.

        Runs before the subscribers start (they bind to streams with declare=False), so it connects first.
        """
        await self.broker.connect()
        await ensure_streams(self.broker.config.connection_state.stream, self.subjects, self.settings.stream_replicas)


def asgi_app(ctx: ServiceContext) -> AsgiFastStream:
    """The service as an ASGI app: the broker, plus /metrics (its own registry) and /health (broker ping)."""
    app = AsgiFastStream(
        ctx.broker,
        asgi_routes=[
            ("/metrics", make_asgi_app(ctx.metrics.registry)),
            ("/health", make_ping_asgi(ctx.broker, timeout=5.0)),
        ],
    )
    app.on_startup(ctx.declare_streams)
    return app


async def stop_tasks(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until done: on Python 3.11 `asyncio.wait_for` (inside nats-py) can swallow a cancellation that
    lands as its inner call completes, and a service's timer loop would carry on into another sleep."""
    for task in tasks:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
        if not task.cancelled() and task.exception() is not None:
            logging.getLogger("fleetpilot.service").error("%s ended with %r", task.get_name(), task.exception())
