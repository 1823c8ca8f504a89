"""The fleet lease under a slow vast.ai call: held for as long as the command runs, and a command whose lease
lapsed stops before its next step (another replica may be changing the fleet). Real Redis, vast.ai simulated
over real HTTP, a create answered seconds late."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from services.provisioner.errors import LeaseLost
from services.provisioner.metrics import ProvisionerMetrics
from services.provisioner.operations import Provisioner
from services.provisioner.state import FLEET_LEASE
from services.provisioner.store import ProvisionerStore
from services.provisioner.vast_client import VastClient
from shared.clock import SimulatedClock
from shared.settings import Settings
from sim.vast.scenario import Endpoint
from sim.vast.server import ScriptedFault
from tests.helpers import eventually
from tests.provisioner.service_harness import QUIET, market_scenario
from tests.provisioner.test_budget_property_http import Recorder
from tests.provisioner.test_service import launch
from tests.sim_vast.harness import StartVast

LEASE_TTL_S = 1.0
SLOW_CREATE_S = 3.0  # three lease lives


async def test_a_slow_create_keeps_the_lease_and_a_lapsed_lease_stops_the_command(
    settings: Settings, start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(market_scenario())
    redis = Redis.from_url(settings.redis_url)
    namespace = f"lease:{uuid.uuid4().hex}"
    config = QUIET.model_copy(update={"lease_ttl_s": LEASE_TTL_S})
    client = VastClient(url, settings.vast_api_key, clock=sim_clock, settings=config)
    provisioner = Provisioner(
        client=client,
        store=ProvisionerStore(redis, namespace),
        clock=sim_clock,
        settings=settings.model_copy(update={"decider_mode": "live"}),
        config=config,
        metrics=ProvisionerMetrics(CollectorRegistry()),
        publisher=Recorder(),
    )
    other_replica = ProvisionerStore(redis, namespace)
    try:
        # the create answers three lease lives late: the lease is renewed under it, so no other replica gets in
        simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="slow", delay_wall_s=SLOW_CREATE_S))
        running = asyncio.create_task(provisioner.launch(launch("slow-create")))
        lease_key = f"{namespace}:lease:{FLEET_LEASE}"
        await eventually(lambda: redis.exists(lease_key))  # the command holds the lease first
        taken_by_other: list[str] = []
        while not running.done():
            if token := await other_replica.try_lease(FLEET_LEASE, LEASE_TTL_S):
                taken_by_other.append(token)
                await other_replica.release_lease(FLEET_LEASE, token)
            await asyncio.sleep(0.1)
        assert (await running).outcome == "done"
        assert taken_by_other == []
        assert len(simulator.calls_to(Endpoint.CREATE)) == 1

        # the lease taken away during the create (a Redis failover, a replica that paused longer than its life):
        # the command stops before its next step, and its retry finds the instance it rented by its label
        simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="slow", delay_wall_s=SLOW_CREATE_S))
        second = launch("lease-lost", count=2)
        running = asyncio.create_task(provisioner.launch(second))
        await asyncio.sleep(SLOW_CREATE_S / 2)
        await redis.delete(lease_key)
        stolen = await other_replica.try_lease(FLEET_LEASE, 10 * SLOW_CREATE_S)
        assert stolen is not None
        with pytest.raises(LeaseLost, match="lapsed mid-command"):
            await running
        assert len(simulator.calls_to(Endpoint.CREATE)) == 2  # the second slot was not rented
        await other_replica.release_lease(FLEET_LEASE, stolen)
        retried = await provisioner.launch(second)
        assert retried.outcome == "done" and len(retried.instance_ids) == 2
        assert len(simulator.calls_to(Endpoint.CREATE)) == 3  # the first slot was not rented again
    finally:
        await client.aclose()
        await redis.aclose()
