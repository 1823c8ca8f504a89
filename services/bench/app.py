"""bench's wiring: bench requests in, suite reports over HTTP, verdicts out on `<prefix>.bench.result`.

kind="gpu" with an instance id waits for that instance's suite report (see collect.py); without one it runs
the suite here. kind="serving" sweeps the endpoint at `url`, telling JetStream it is still at work meanwhile.
"""

from __future__ import annotations

import asyncio

from faststream.asgi import AsgiFastStream
from faststream.nats import NatsMessage
from redis.asyncio import Redis

from services.bench.config import BenchSettings
from services.bench.intake import REPORT_PATH, SUITE_PATH, intake_app
from services.bench.metrics import BenchMetrics
from services.bench.rate_limit import PerKeyRateLimit
from services.bench.requests import SERVICE, BenchRequests
from services.bench.store import BenchStore
from shared.bus import durable_pull
from shared.contract import BenchRequest
from shared.live_mode import exit_for_setting, is_live
from shared.redis_client import connect_redis
from shared.service import ServiceContext, asgi_app, stop_tasks
from shared.settings import Settings
from shared.streams import BENCH

# GPU requests are quick (store, maybe judge); a long serving sweep must not hold them up.
CONCURRENT_REQUESTS = 4


def build(
    ctx: ServiceContext, bench_settings: BenchSettings | None = None, redis: Redis | None = None
) -> AsgiFastStream:
    config = bench_settings or BenchSettings()
    metrics = BenchMetrics(ctx.metrics.registry)
    redis_client = redis or connect_redis(ctx.settings.redis_url)
    requests = BenchRequests(ctx, config, BenchStore(redis_client, ctx.subjects.prefix, config.report_ttl_s), metrics)

    @ctx.broker.subscriber(
        ctx.subjects.bench_request,
        **durable_pull(BENCH, ctx.settings, SERVICE),
        max_workers=CONCURRENT_REQUESTS,
    )
    async def on_bench_request(request: BenchRequest, message: NatsMessage) -> None:
        await requests.handle(request, message)

    sweeper: list[asyncio.Task[None]] = []

    async def start_sweeper() -> None:
        sweeper.append(asyncio.create_task(requests.sweep_forever()))

    async def stop_sweeper() -> None:
        await stop_tasks(sweeper)
        sweeper.clear()
        if redis is None:
            await redis_client.aclose()

    app = asgi_app(ctx)
    rate_limit = PerKeyRateLimit(config.report_burst, config.report_per_minute)
    intake = intake_app(
        requests.on_report, config.report_token, metrics, config.report_max_bytes, rate_limit, ctx.clock
    )
    app.mount(SUITE_PATH, intake)
    app.mount(REPORT_PATH, intake)
    app.after_startup(start_sweeper)
    app.on_shutdown(stop_sweeper)
    return app


def create_app(settings: Settings | None = None) -> AsgiFastStream:
    """Entry point for `faststream run services.bench.app:create_app --factory` and `fleetpilot run bench`."""
    config = BenchSettings()
    if config.report_token is None or not config.report_token.get_secret_value():
        # without it every report is refused, every rented machine ends `unknown`: refuse to start instead
        exit_for_setting(
            "FLEETPILOT_BENCH_REPORT_TOKEN is not set: expected the token rented machines file their suite "
            "reports with (the same value for bench and the provisioner; e.g. `openssl rand -hex 24`)"
        )
    ctx = ServiceContext.from_settings(
        SERVICE, settings, secrets={"FLEETPILOT_BENCH_REPORT_TOKEN": config.report_token}
    )
    if is_live(ctx.settings) and config.cpu_reports != "fail":
        exit_for_setting(
            f"FLEETPILOT_BENCH_CPU_REPORTS={config.cpu_reports} would pass rented GPU machines that ran no GPU "
            "benchmark: refused in live mode (the real vast.ai API with FLEETPILOT_DECIDER_MODE=live); unset it"
        )
    return build(ctx, config)
