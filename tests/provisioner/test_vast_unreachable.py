"""A provisioner that cannot reach vast.ai is unhealthy on /health, saying so, and healthy again once a list
succeeds. Real NATS and Redis; vast.ai is a port nobody listens on."""

from __future__ import annotations

from datetime import UTC, datetime

from services.provisioner.app import VastListing
from shared.clock import SimulatedClock
from shared.settings import Settings
from sim.infra import free_port
from tests.helpers import eventually
from tests.provisioner.service_harness import running_provisioner
from tests.provisioner.test_first_day import get_health


async def test_an_unreachable_vast_ai_makes_the_provisioner_unhealthy_with_the_reason(
    settings: Settings, sim_clock: SimulatedClock
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    async with running_provisioner(settings, sim_clock, nobody) as service:
        failed = {"outcome": "failed"}
        registry = service.context.metrics.registry
        await eventually(lambda: registry.get_sample_value("fleetpilot_provisioner_reconciliations_total", failed))
        health = await get_health(service)
    assert health.status_code == 503, health.text
    [reason] = health.json()["reasons"]
    assert reason.startswith("vast.ai could not be reached or listed since "), reason


def test_one_good_list_clears_the_problem_and_the_first_failure_dates_it() -> None:
    listing = VastListing()
    first, later = datetime(2026, 3, 2, 9, 0, tzinfo=UTC), datetime(2026, 3, 2, 9, 5, tzinfo=UTC)
    listing.record(False, first)
    listing.record(False, later)
    assert listing.problem() is not None and "since 2026-03-02 09:00:00 UTC" in listing.problem()  # type: ignore[operator]
    listing.record(True, later)
    assert listing.problem() is None
