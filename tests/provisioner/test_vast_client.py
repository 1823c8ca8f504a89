"""The vast.ai client against the simulator over real HTTP: retries within bounds, spacing, typed errors."""

from __future__ import annotations

import itertools

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from services.provisioner.metrics import VastApiMetrics
from services.provisioner.settings import ProvisionerSettings
from services.provisioner.vast_client import (
    AmbiguousCreate,
    InstanceNotFound,
    OfferGone,
    RateLimited,
    VastAuthError,
    VastClient,
    VastEndpointGone,
    VastServerError,
    VastUnreachable,
)
from shared.clock import SimulatedClock
from shared.processes import free_port
from sim.vast.scenario import Endpoint, OfferSpec, Scenario
from sim.vast.server import ScriptedFault
from tests.helpers import eventually
from tests.provisioner.conftest import AdvancingClock
from tests.provisioner.service_harness import NO_WAITS
from tests.sim_vast.harness import API_KEY, StartVast

REQUEST = {"image": "worker:1", "disk": 20, "label": "fleetpilot:k:0"}
NO_SPACING = ProvisionerSettings(spacing_s=NO_WAITS, backoff_initial_s=1.0, backoff_max_s=8.0, max_attempts=5)


def offers(n: int, price: float = 0.5) -> list[OfferSpec]:
    return [OfferSpec(offer_id=100 + i, gpu_model="RTX 4090", price_usd_per_h=price + i / 100) for i in range(n)]


def client_for(
    url: str, clock: AdvancingClock, config: ProvisionerSettings = NO_SPACING, key: str = API_KEY
) -> tuple[VastClient, CollectorRegistry]:
    registry = CollectorRegistry()
    client = VastClient(url, SecretStr(key), clock=clock, settings=config, metrics=VastApiMetrics(registry))
    return client, registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_search_returns_typed_offers(start_vast: StartVast, sim_clock: SimulatedClock) -> None:
    _, url = await start_vast(Scenario.quiet(offers=offers(3)))
    client, registry = client_for(url, AdvancingClock(sim_clock))
    found = await client.search_offers({"order": [["dph_total", "asc"]]})
    await client.aclose()
    assert [(o.id, o.gpu_name) for o in found] == [(100, "RTX 4090"), (101, "RTX 4090"), (102, "RTX 4090")]
    assert found[0].dph_total == pytest.approx(0.5, abs=0.01)  # plus a little storage
    assert found[0].reliability_score == pytest.approx(0.98)
    assert sample(registry, "fleetpilot_vast_api_calls_total", endpoint="search", outcome="ok") == 1


async def test_a_429_storm_ends_in_success_within_the_retry_bound(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(1)))
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.SEARCH, kind="rate_limit", count=3))
    clock = AdvancingClock(sim_clock)
    client, registry = client_for(url, clock)
    assert [o.id for o in await client.search_offers({})] == [100]
    await client.aclose()
    assert [c.status for c in simulator.calls_to(Endpoint.SEARCH)] == [429, 429, 429, 200]
    # no Retry-After: each retry waited at least the endpoint's documented interval (6 s for search)
    assert len(clock.slept) == 3 and all(wait >= 6.0 for wait in clock.slept)
    assert sample(registry, "fleetpilot_vast_rate_limited_total", endpoint="search") == 3


async def test_a_retry_after_longer_than_the_documented_interval_is_honoured(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(1)))
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.SEARCH, kind="rate_limit", retry_after_s=20, count=1))
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.SEARCH, kind="rate_limit", retry_after_s=600, count=1))
    clock = AdvancingClock(sim_clock)
    client, _ = client_for(url, clock)
    assert [o.id for o in await client.search_offers({})] == [100]
    await client.aclose()
    assert clock.slept == [20.0, 60.0]  # 20 s as asked; 600 s capped at the official client's 60 s


async def test_a_longer_429_storm_stops_at_the_bound(start_vast: StartVast, sim_clock: SimulatedClock) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(1)))
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.SEARCH, kind="rate_limit", count=50))
    client, _ = client_for(url, AdvancingClock(sim_clock))
    with pytest.raises(RateLimited):
        await client.search_offers({})
    await client.aclose()
    assert len(simulator.calls_to(Endpoint.SEARCH)) == NO_SPACING.max_attempts


async def test_a_run_of_5xx_ends_in_success_and_a_longer_one_stops_at_the_bound(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(1)))
    clock = AdvancingClock(sim_clock)
    client, registry = client_for(url, clock)
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.LIST_V1, kind="error", status=503, count=3))
    assert (await client.list_instances()).instances == []
    assert [c.status for c in simulator.calls_to(Endpoint.LIST_V1)] == [503, 503, 503, 200]
    assert clock.slept == [1.0, 2.0, 4.0]  # bounded exponential backoff
    simulator.calls.clear()
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.LIST_V1, kind="error", status=502, count=50))
    with pytest.raises(VastServerError):
        await client.list_instances()
    await client.aclose()
    assert len(simulator.calls_to(Endpoint.LIST_V1)) == NO_SPACING.max_attempts
    assert clock.slept[-4:] == [1.0, 2.0, 4.0, 8.0]  # capped at backoff_max_s
    assert sample(registry, "fleetpilot_vast_api_calls_total", endpoint="list_v1", outcome="server_error") == 8


async def test_documented_spacing_keeps_the_client_clear_of_429s(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario(market=[], offers=offers(3)))  # vast's documented rate limits
    clock = AdvancingClock(sim_clock)
    client, _ = client_for(url, clock, ProvisionerSettings())  # the documented spacing
    for n in range(3):
        await client.search_offers({})
        await client.create_instance(100 + n, {**REQUEST, "label": f"fleetpilot:k:{n}"})
        await client.list_instances()
    await client.aclose()
    assert all(call.status == 200 for call in simulator.calls)
    creates = [c.at for c in simulator.calls_to(Endpoint.CREATE)]
    assert all((b - a).total_seconds() >= 4.5 for a, b in itertools.pairwise(creates))


async def test_after_a_429_without_retry_after_the_create_waits_out_the_penalty(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario(market=[], offers=offers(2)))
    clock = AdvancingClock(sim_clock)
    client, _ = client_for(url, clock)  # no spacing of its own: it runs into the limit
    await client.create_instance(100, REQUEST)
    await client.create_instance(101, {**REQUEST, "label": "fleetpilot:k:1"})
    await client.aclose()
    assert [c.status for c in simulator.calls_to(Endpoint.CREATE)] == [200, 429, 200]
    assert clock.slept == [12.5]


async def test_a_create_that_timed_out_is_ambiguous_and_not_repeated(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(1)))
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="slow", delay_wall_s=1.0))
    config = NO_SPACING.model_copy(update={"request_timeout_s": 0.3})
    client, registry = client_for(url, AdvancingClock(sim_clock), config)
    with pytest.raises(AmbiguousCreate):
        await client.create_instance(100, REQUEST)
    await eventually(lambda: len(simulator.calls_to(Endpoint.CREATE)) == 1)
    [entry] = simulator.world.ledger(sim_clock.now()).entries
    assert entry.label == "fleetpilot:k:0"  # it happened, but the client could not know
    [found] = (await client.list_instances({"label": {"eq": "fleetpilot:k:0"}})).instances
    assert found.id == entry.instance_id
    await client.aclose()
    assert sample(registry, "fleetpilot_vast_api_calls_total", endpoint="create", outcome="timeout") == 1


async def test_a_create_answered_5xx_is_ambiguous_but_a_429_is_safely_retried(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(2)))
    client, _ = client_for(url, AdvancingClock(sim_clock))
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="error_after", status=502))
    with pytest.raises(AmbiguousCreate):
        await client.create_instance(100, REQUEST)
    simulator.faults.append(ScriptedFault(endpoint=Endpoint.CREATE, kind="rate_limit", count=2))
    assert await client.create_instance(101, {**REQUEST, "label": "fleetpilot:k:1"}) > 0
    await client.aclose()
    assert [c.status for c in simulator.calls_to(Endpoint.CREATE)] == [502, 429, 429, 200]


@pytest.mark.parametrize("status", [404, 401])
async def test_a_bad_key_is_an_auth_error_after_one_request(
    start_vast: StartVast, sim_clock: SimulatedClock, status: int
) -> None:
    simulator, url = await start_vast(Scenario.quiet(api={"rate_limits": {}, "bad_key_status": status}))
    clock = AdvancingClock(sim_clock)
    client, registry = client_for(url, clock, key="not-the-key")
    with pytest.raises(VastAuthError, match="refused") as refused:
        await client.list_instances()
    await client.aclose()
    assert refused.value.status == status
    assert len(simulator.calls) == 1 and clock.slept == []
    assert "not-the-key" not in str(refused.value)
    assert sample(registry, "fleetpilot_vast_api_calls_total", endpoint="list_v1", outcome="auth_error") == 1


async def test_the_v0_list_answering_410_raises_rather_than_returning_nothing(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(1)))
    client, _ = client_for(url, AdvancingClock(sim_clock))
    await client.create_instance(100, REQUEST)
    with pytest.raises(VastEndpointGone):
        await client.list_instances_v0()
    simulator.api = simulator.api.model_copy(update={"v0_list": "ok"})
    assert len((await client.list_instances_v0()).instances) == 1
    await client.aclose()
    assert len(simulator.calls_to(Endpoint.LIST_V0)) == 2  # a 410 is not retried


async def test_the_v1_list_follows_next_token_through_every_page(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(60)))
    client, _ = client_for(url, AdvancingClock(sim_clock))
    for n in range(60):
        await client.create_instance(100 + n, {**REQUEST, "label": f"fleetpilot:k:{n}"})
    listed = (await client.list_instances()).instances
    await client.aclose()
    assert len(listed) == 60 and len({i.id for i in listed}) == 60
    assert len(simulator.calls_to(Endpoint.LIST_V1)) == 3  # 25 + 25 + 10


async def test_gone_offers_unknown_instances_and_show(start_vast: StartVast, sim_clock: SimulatedClock) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(1)))
    client, _ = client_for(url, AdvancingClock(sim_clock))
    simulator.world.take_offer(100)
    with pytest.raises(OfferGone) as gone:
        await client.create_instance(100, REQUEST)
    assert gone.value.status == 410
    with pytest.raises(InstanceNotFound):
        await client.destroy_instance(1)
    with pytest.raises(InstanceNotFound):
        await client.set_state(1, "stopped")
    assert await client.show_instance(1) is None
    await client.aclose()


async def test_nothing_listening_is_unreachable_after_the_bound(sim_clock: SimulatedClock) -> None:
    clock = AdvancingClock(sim_clock)
    client, registry = client_for(f"http://127.0.0.1:{free_port()}", clock)
    with pytest.raises(VastUnreachable):
        await client.search_offers({})
    await client.aclose()
    assert len(clock.slept) == NO_SPACING.max_attempts - 1
    assert sample(registry, "fleetpilot_vast_api_calls_total", endpoint="search", outcome="connection_error") == 5
