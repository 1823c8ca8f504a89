"""The vast.ai client's stop, start, bids and the new row fields, against the simulator over real HTTP."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from services.provisioner.settings import ProvisionerSettings
from services.provisioner.vast_client import (
    BidTooLow,
    InstanceNotFound,
    UnsendableRequest,
    VastClient,
    VastError,
    VastRequestError,
)
from shared.clock import SimulatedClock
from sim.vast.scenario import Endpoint, OfferSpec, Scenario
from tests.provisioner.conftest import AdvancingClock
from tests.provisioner.service_harness import NO_WAITS
from tests.sim_vast.harness import API_KEY, StartVast

REQUEST = {"image": "worker:1", "disk": 20, "label": "fleetpilot:k:0", "target_state": "running"}
NO_SPACING = ProvisionerSettings(spacing_s=NO_WAITS, backoff_initial_s=1.0, backoff_max_s=8.0, max_attempts=5)
TEN_MINUTES = {"startup_s": {"min": 600, "max": 600}}


def scenario(**overrides: object) -> Scenario:
    offers = [OfferSpec(offer_id=100 + i, gpu_model="RTX 4090", price_usd_per_h=0.5) for i in range(3)]
    return Scenario.quiet(offers=offers, startup=TEN_MINUTES, **overrides)


def client_for(url: str, sim_clock: SimulatedClock) -> VastClient:
    return VastClient(url, SecretStr(API_KEY), clock=AdvancingClock(sim_clock), settings=NO_SPACING)


async def test_a_bid_create_sends_the_price_and_a_plain_create_rents_on_demand(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(scenario())
    client = client_for(url, sim_clock)
    bid_offers = await client.search_offers({"type": "bid", "order": [["id", "asc"]]})
    assert bid_offers[0].min_bid == pytest.approx(0.25) and bid_offers[0].is_bid is True
    assert bid_offers[0].inet_down == pytest.approx(900) and bid_offers[0].inet_down_cost == pytest.approx(0.005)
    bid = await client.create_instance(100, REQUEST, bid_usd_per_h=0.3)
    on_demand = await client.create_instance(101, {**REQUEST, "label": "fleetpilot:k:1"})
    with pytest.raises(ValueError, match="bid_usd_per_h"):
        await client.create_instance(102, {**REQUEST, "price": 0.3})
    with pytest.raises(BidTooLow):
        await client.create_instance(102, REQUEST, bid_usd_per_h=0.1)
    listed = {i.id: i for i in (await client.list_instances()).instances}
    await client.aclose()
    assert simulator.world.instances[bid].request.price == 0.3
    assert simulator.world.instances[on_demand].request.price is None
    assert (listed[bid].is_bid, listed[bid].dph_base, listed[bid].min_bid) == (True, 0.3, 0.25)
    assert (listed[on_demand].is_bid, listed[on_demand].dph_base) == (False, 0.5)
    assert len(simulator.calls_to(Endpoint.CREATE)) == 3  # the request with a price inside never left


async def test_stop_and_start_keep_the_instance_and_a_start_may_wait_for_its_gpu(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    taken = {"gpu_taken_per_stopped_h": 1000, "gpu_free_after_s": None}
    _, url = await start_vast(scenario(stop_start=taken))
    client = client_for(url, sim_clock)
    instance_id = await client.create_instance(100, REQUEST)
    sim_clock.advance(600)
    await client.stop_instance(instance_id)
    stopped = await client.show_instance(instance_id)
    assert stopped is not None
    assert (stopped.actual_status, stopped.intended_status, stopped.next_state) == ("stopped", "stopped", "stopped")
    sim_clock.advance(3600)
    await client.start_instance(instance_id)
    sim_clock.advance(3600)
    waiting = await client.show_instance(instance_id)
    await client.aclose()
    assert waiting is not None
    assert (waiting.actual_status, waiting.intended_status, waiting.cur_state) == ("stopped", "running", "stopped")
    assert waiting.status_msg is not None and waiting.status_msg.startswith("Scheduling")


async def test_change_bid_resumes_an_outbid_instance_and_errors_are_typed(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(scenario())
    client = client_for(url, sim_clock)
    bid = await client.create_instance(100, REQUEST, bid_usd_per_h=0.3)
    on_demand = await client.create_instance(101, {**REQUEST, "label": "fleetpilot:k:1"})
    simulator.world.set_bid_share("RTX 4090", 0.7, sim_clock.now())  # 0.35 $/h outbids 0.30
    sim_clock.advance(600)
    paused = await client.show_instance(bid)
    assert paused is not None and paused.actual_status == "stopped"
    await client.change_bid(bid, 0.4)
    sim_clock.advance(600)
    resumed = await client.show_instance(bid)
    assert resumed is not None and (resumed.actual_status, resumed.dph_base) == ("running", 0.4)
    with pytest.raises(BidTooLow):
        await client.change_bid(bid, 0.1)
    with pytest.raises(VastRequestError, match="cannot change"):
        await client.change_bid(on_demand, 0.4)
    with pytest.raises(InstanceNotFound):
        await client.change_bid(999, 0.4)
    with pytest.raises(ValueError, match="bid_usd_per_h"):
        await client.change_bid(bid, 0)
    await client.aclose()
    assert [c.status for c in simulator.calls_to(Endpoint.BID_PRICE)] == [200, 400, 400, 404]


async def test_odd_values_in_the_new_fields_read_as_unknown_not_as_an_unreadable_row(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(scenario())
    client = client_for(url, sim_clock)
    instance_id = await client.create_instance(100, REQUEST)
    simulator.world.row_overrides[instance_id] = {"is_bid": "maybe", "min_bid": "n/a", "inet_down": [1]}
    [listed] = (await client.list_instances()).instances
    await client.aclose()
    assert listed.id == instance_id
    assert (listed.is_bid, listed.min_bid, listed.inet_down) == (None, None, None)


@pytest.mark.parametrize("bid_usd_per_h", [0.0, -0.1, float("nan")])
async def test_a_bid_the_client_will_not_send_is_a_vast_error_and_nothing_is_sent(
    start_vast: StartVast, sim_clock: SimulatedClock, bid_usd_per_h: float
) -> None:
    """A plain ValueError here escaped the launch handler (which answers vast errors): a create it cannot build is
    a typed error of the port, answered like a refused request, and never reaches vast."""
    simulator, url = await start_vast(scenario())
    client = client_for(url, sim_clock)
    with pytest.raises(VastError, match="bid_usd_per_h") as refused:
        await client.create_instance(100, REQUEST, bid_usd_per_h=bid_usd_per_h)
    with pytest.raises(UnsendableRequest, match="bid_usd_per_h"):
        await client.change_bid(1, bid_usd_per_h)
    await client.aclose()
    assert isinstance(refused.value, UnsendableRequest)
    assert simulator.calls_to(Endpoint.CREATE) == [] and simulator.calls_to(Endpoint.BID_PRICE) == []
