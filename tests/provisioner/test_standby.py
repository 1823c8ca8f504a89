"""Two provisioner replicas on one Redis: one reconciles with vast.ai, the other stands by on the lease (no
doubled vast.ai calls), and takes over once the active one stops. Real NATS and Redis, vast.ai simulated over
HTTP, the reconcile loop on a simulated clock."""

from __future__ import annotations

import contextlib

from services.provisioner.app import ProvisionerService
from shared.clock import SimulatedClock
from shared.settings import Settings
from sim.vast.scenario import Endpoint
from tests.helpers import eventually
from tests.provisioner.service_harness import QUIET, market_scenario, running_provisioner
from tests.sim_vast.harness import StartVast

# a round a minute; the lease outlives two rounds, so the active replica keeps it
CONFIG = QUIET.model_copy(update={"reconcile_interval_s": 60.0, "lease_ttl_s": 150.0})
ROUNDS = 4


def reconciliations(service: ProvisionerService) -> float:
    registry = service.context.metrics.registry
    values = (
        registry.get_sample_value("fleetpilot_provisioner_reconciliations_total", {"outcome": outcome})
        for outcome in ("ok", "failed")
    )
    return sum(value or 0.0 for value in values)


async def test_a_second_replica_stands_by_instead_of_listing_vast_ai_too_and_takes_over(
    settings: Settings, start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with contextlib.AsyncExitStack() as running, contextlib.AsyncExitStack() as running_first:
        first = await running_first.enter_async_context(running_provisioner(settings, sim_clock, url, CONFIG))
        await eventually(lambda: reconciliations(first) == 1)  # the first to start holds the lease
        second = await running.enter_async_context(running_provisioner(settings, sim_clock, url, CONFIG))
        for round_number in range(2, ROUNDS + 1):
            await sim_clock.advance_and_settle(CONFIG.reconcile_interval_s)
            await eventually(lambda: reconciliations(first) == round_number)  # noqa: B023 (awaited here)
        assert reconciliations(second) == 0
        assert len(simulator.calls_to(Endpoint.LIST_V1)) == ROUNDS  # one list a round, not two

        await running_first.aclose()  # the active one stops and releases its lease
        await sim_clock.advance_and_settle(CONFIG.reconcile_interval_s)
        await eventually(lambda: reconciliations(second) == 1)
