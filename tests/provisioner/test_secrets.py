"""The vast.ai key appears in no log line, printed output, metric, event, stored state or error text."""

from __future__ import annotations

import logging

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from prometheus_client import generate_latest
from pydantic import SecretStr
from redis.asyncio import Redis

from shared.clock import SimulatedClock
from shared.contract import LaunchInstances, LaunchReason
from shared.settings import Settings
from sim.vast.scenario import Endpoint
from sim.vast.server import ScriptedFault
from tests.provisioner.service_harness import NOW, QUIET, BusRecorder, market_scenario, running_provisioner, send
from tests.sim_vast.harness import API_KEY, StartVast

OTHER_KEY = "a-second-secret-key-4711"


def launch(key: str) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW, source="decider", idempotency_key=key, requested_by="policy", count=1,
        launch_priority="normal", reason=LaunchReason.BACKLOG,
    )  # fmt: skip


async def test_the_key_is_never_written_anywhere(
    settings: Settings,
    nc: NatsClient,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    bus: BusRecorder,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore included: they log every request
    simulator, url = await start_vast(market_scenario())
    simulator.faults.extend(
        [
            ScriptedFault(endpoint=Endpoint.SEARCH, kind="rate_limit", count=2),
            ScriptedFault(endpoint=Endpoint.CREATE, kind="slow", delay_wall_s=0.8),
            ScriptedFault(endpoint=Endpoint.LIST_V1, kind="error", status=500, count=1),
        ]
    )
    # retries without waiting: the simulated clock does not move while the provisioner waits
    config = QUIET.model_copy(update={"request_timeout_s": 0.3, "rate_limited_wait_s": {"search": 0.0}})
    texts: list[str] = []
    async with running_provisioner(settings, sim_clock, url, config) as service:
        await send(js, settings, "launch", launch("launch-secret-1"))
        assert (await bus.result_for("launch-secret-1")).outcome == "done"
        texts.append(generate_latest(service.context.metrics.registry).decode())
    # the same provisioner with a key vast refuses (the refusal is an error text that must not quote it)
    async with running_provisioner(settings, sim_clock, url, config, vast_api_key=SecretStr(OTHER_KEY)) as service:
        await send(js, settings, "launch", launch("launch-secret-2"))
        refused = await bus.result_for("launch-secret-2")
        assert refused.outcome == "failed"
        texts.append(generate_latest(service.context.metrics.registry).decode())
        texts.append(repr(service.operations.client.__dict__))

    redis = Redis.from_url(settings.redis_url)
    for key in await redis.keys("*"):
        value = await redis.dump(key)
        texts.append(repr(key) + repr(value))
    await redis.aclose()
    captured = capfd.readouterr()
    texts += [caplog.text, captured.out, captured.err]
    texts += [event.model_dump_json() for event in [*bus.observed, *bus.results]]
    texts += [call.model_dump_json() for call in simulator.calls]
    assert "HTTP Request" in caplog.text  # the request log was captured, so the check below means something
    for secret in (API_KEY, OTHER_KEY):
        assert all(secret not in text for text in texts), (
            f"the key leaked into {[t[:80] for t in texts if secret in t]}"
        )
