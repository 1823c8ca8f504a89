"""demand's wiring: task events from JetStream into the core, metrics out."""

from __future__ import annotations

from collections import OrderedDict

from faststream.asgi import AsgiFastStream

from services.demand.metrics import DemandMetrics
from shared.bus import durable_pull
from shared.contract import TaskEvent
from shared.service import ServiceContext, asgi_app
from shared.settings import Settings
from shared.streams import DEMAND

SERVICE = "demand"
SEEN_EVENT_IDS_MAX = 100_000


class SeenEvents:
    """Bounded memory of processed event ids: a redelivered event is applied once."""

    def __init__(self, capacity: int = SEEN_EVENT_IDS_MAX) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, event_id: str) -> bool:
        if event_id in self._ids:
            return False
        self._ids[event_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True


def build(ctx: ServiceContext) -> AsgiFastStream:
    metrics = DemandMetrics(ctx.metrics.registry)
    seen = SeenEvents()

    @ctx.broker.subscriber(ctx.subjects.tasks_all, **durable_pull(DEMAND, ctx.settings, "demand-tasks"))
    async def on_task_event(event: TaskEvent) -> None:
        if not seen.first_time(event.event_id):
            ctx.metrics.duplicates_ignored.labels(SERVICE).inc()
            return
        metrics.task_events.labels(event.kind).inc()

    return asgi_app(ctx)


def create_app(settings: Settings | None = None) -> AsgiFastStream:
    """Entry point for `faststream run services.demand.app:create_app --factory` and `fleetpilot run demand`."""
    return build(ServiceContext.from_settings(SERVICE, settings))
