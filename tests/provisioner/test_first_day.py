"""A first day on a real account: the dry run sends no mutating call, shadow mode refuses every command, and a
wrong API key shows on /health and in a gauge."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from nats.js import JetStreamContext
from pydantic import BaseModel, SecretStr

from services.cli.render import api_key_line
from services.provisioner.app import ProvisionerService, assemble
from services.provisioner.dry_run import redacted, secret_values
from shared.clock import Clock, SimulatedClock
from shared.contract import RefusalRule
from shared.service import ServiceContext
from shared.settings import Settings
from sim.vast.scenario import Endpoint
from tests.helpers import eventually
from tests.provisioner.service_harness import OFFER_A2, QUIET, BusRecorder, market_scenario, running_provisioner, send
from tests.provisioner.test_service import destroy, launch
from tests.sim_vast.harness import StartVast


async def get_health(service: ProvisionerService) -> httpx.Response:
    transport = httpx.ASGITransport(app=service.app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://provisioner") as client:
        return await client.get("/health")


@contextlib.asynccontextmanager
async def dry_run_provisioner(settings: Settings, clock: Clock, vast_url: str) -> AsyncIterator[ProvisionerService]:
    service = assemble(
        ServiceContext("provisioner", settings.model_copy(update={"vast_api_url": vast_url}), clock),
        QUIET,
        dry_run=True,
    )
    await service.app.start()
    try:
        yield service
    finally:
        await service.app.stop()


async def test_the_dry_run_reads_for_real_and_logs_each_create_and_destroy_without_sending_it(
    settings: Settings,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):  # a live day before: one machine rented
        await send(js, settings, "launch", launch("live-day-001", 1))
        rented = await bus.result_for("live-day-001")
    assert rented.outcome == "done", rented.detail
    [instance_id] = rented.instance_ids
    calls_before = len(simulator.calls)

    caplog.set_level(logging.WARNING, logger="fleetpilot.provisioner.dry_run")
    async with dry_run_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("dry-run-001", 1))
        launched = await bus.result_for("dry-run-001")
        await send(js, settings, "destroy", destroy("dry-run-002", instance_id))
        destroyed = await bus.result_for("dry-run-002")

    assert launched.outcome == "failed" and "dry run, not sent: PUT /api/v0/asks/" in launched.detail
    assert destroyed.outcome == "failed" and f"DELETE /api/v0/instances/{instance_id}/" in destroyed.detail
    during = simulator.calls[calls_before:]
    endpoints = {call.endpoint for call in during}
    assert Endpoint.SEARCH in endpoints and Endpoint.LIST_V1 in endpoints  # the reads were real
    assert not endpoints & {Endpoint.CREATE, Endpoint.DESTROY, Endpoint.MANAGE}
    ledger = simulator.world.ledger(sim_clock.now())
    assert [(e.instance_id, e.destroyed_at) for e in ledger.entries] == [(instance_id, None)]
    logged = [r.getMessage() for r in caplog.records if r.name == "fleetpilot.provisioner.dry_run"]
    assert any(line.startswith(f"dry run: would call vast.ai PUT /api/v0/asks/{OFFER_A2}/ {{") for line in logged)
    assert f"dry run: would call vast.ai DELETE /api/v0/instances/{instance_id}/ {{}}" in logged
    secrets = [settings.vast_api_key.get_secret_value(), *secret_values(QUIET)]  # a report token rides in onstart
    assert not any(secret in text for secret in secrets for text in [*logged, launched.detail])


async def test_in_shadow_mode_every_command_is_refused_before_vast_is_asked(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url, decider_mode="shadow"):
        await send(js, settings, "launch", launch("shadow-001", 2))
        result = await bus.result_for("shadow-001")
    assert result.outcome == "refused" and result.refusal_rule is RefusalRule.SHADOW_MODE
    assert "FLEETPILOT_DECIDER_MODE=shadow" in result.detail
    assert simulator.calls_to(Endpoint.CREATE) == []
    assert simulator.world.ledger(sim_clock.now()).entries == []


async def test_a_refused_api_key_makes_the_provisioner_unhealthy_with_the_reason(
    settings: Settings, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    _, url = await start_vast(market_scenario(), api_key="the-real-key")  # the provisioner has another one
    async with running_provisioner(settings, sim_clock, url) as service:
        registry = service.context.metrics.registry
        await eventually(lambda: registry.get_sample_value("fleetpilot_vast_auth_ok") == 0.0)
        health = await get_health(service)
    assert health.status_code == 503
    [reason] = health.json()["reasons"]
    assert "vast.ai refused the API key (FLEETPILOT_VAST_API_KEY)" in reason
    assert settings.vast_api_key.get_secret_value() not in health.text
    # and `fleetpilot status` hears of it: the account view says the key was refused
    refused = await eventually(lambda: [a for a in bus.accounts if a.api_key == "refused"], timeout_s=30)
    assert settings.vast_api_key.get_secret_value() not in refused[-1].api_key_detail
    line = api_key_line(refused[-1])
    assert line.startswith("vast.ai REFUSED the API key (FLEETPILOT_VAST_API_KEY of the provisioner)")


async def test_an_accepted_key_sets_the_gauge_and_health_passes(
    settings: Settings, start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    _, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url) as service:
        registry = service.context.metrics.registry
        await eventually(lambda: registry.get_sample_value("fleetpilot_vast_auth_ok") == 1.0)
        health = await get_health(service)
    assert health.status_code == 200 and health.json() == {"healthy": True, "reasons": []}


class WithSecrets(BaseModel):
    token: SecretStr
    unset: SecretStr | None = None
    empty: SecretStr = SecretStr("")
    plain: str = "not-a-secret"


def test_the_dry_run_line_hides_every_secret_of_the_settings() -> None:
    settings = WithSecrets(token=SecretStr("t0ken"))
    assert secret_values(settings) == ["t0ken"]
    line = 'PUT /api/v0/asks/1/ {"onstart":"TOKEN=t0ken run","image":"not-a-secret"}'
    assert redacted(line, secret_values(settings)) == (
        'PUT /api/v0/asks/1/ {"onstart":"TOKEN=********** run","image":"not-a-secret"}'
    )
