"""The simulator answers vast.ai's official client (the `vastai` package) as vast.ai does, over real HTTP.

The client's calls are synchronous (requests), so each runs in a thread while the simulator serves on the test's
event loop. What each call sends and reads is recorded, with the source lines, in sim/vast/README.md.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import requests
from vastai import VastAI

from services.provisioner.ranking import OfferConstraints, search_query
from shared.clock import SimulatedClock
from sim.vast.scenario import Endpoint, OfferSpec, Scenario
from tests.sim_vast.harness import API_KEY, StartVast, authed

# fields a real offer carries that FleetPilot or the official client read (vast-cli `offers_fields`)
OFFER_FIELDS = {
    "id", "ask_contract_id", "machine_id", "host_id", "gpu_name", "num_gpus", "gpu_ram", "dph_total", "dph_base",
    "min_bid", "reliability", "reliability2", "verified", "external", "rentable", "rented", "inet_down", "inet_up",
    "disk_bw", "disk_space", "cuda_max_good", "geolocation", "score", "dlperf", "hosting_type", "driver_version",
}  # fmt: skip


def market() -> Scenario:
    return Scenario.quiet(
        offers=[
            OfferSpec(offer_id=11, gpu_model="RTX 4090", price_usd_per_h=0.52),
            OfferSpec(offer_id=12, gpu_model="RTX 4090", price_usd_per_h=0.44),
            OfferSpec(offer_id=13, gpu_model="RTX 4090", price_usd_per_h=0.30, verified=False),
            OfferSpec(offer_id=14, gpu_model="RTX 3090", price_usd_per_h=0.20),
        ]
    )


async def in_thread(call: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(call, *args, **kwargs)


async def test_search_offers_with_the_cli_query_language(start_vast: StartVast) -> None:
    simulator, url = await start_vast(market())
    client = VastAI(api_key=API_KEY, server_url=url)
    found = await in_thread(client.search_offers, query="gpu_name=RTX_4090 num_gpus=1", order="dph_total", limit=5)
    # the CLI's default filters applied (verified, not external, rentable): the unverified offer is left out
    assert [offer["id"] for offer in found] == [12, 11]
    for offer in found:
        assert offer.keys() >= OFFER_FIELDS, OFFER_FIELDS - offer.keys()
        assert offer["verified"] is True and offer["external"] is False and offer["rentable"] is True
        assert offer["rented"] is False and isinstance(offer["reliability2"], float)
    [call] = simulator.calls_to(Endpoint.SEARCH)
    assert (call.method, call.path, call.status) == ("POST", "/api/v0/bundles/", 200)


async def test_fleetpilot_asks_what_the_official_client_asks_by_default(start_vast: StartVast) -> None:
    """The CLI's defaults (`verified`, `external`, `rentable`, `rented`) are in FleetPilot's query too."""
    _, url = await start_vast(market())
    constraints = OfferConstraints(allowed_gpu_models=("RTX 4090",), max_price_usd_per_h=1.0, min_cuda=12.0)
    ours = search_query(constraints, limit=10, disk_gb=20)
    client = VastAI(api_key=API_KEY, server_url=url)
    theirs = await in_thread(client.search_offers, query={"gpu_name": {"in": ["RTX 4090"]}}, order="dph_total")
    for name, condition in {"verified": True, "external": False, "rentable": True, "rented": False}.items():
        assert ours[name] == {"eq": condition}
    assert ours["type"] == "on-demand" and ours["order"] == [["dph_total", "asc"]]
    async with authed(url) as http:
        answer = await http.post("/api/v0/bundles/", json=ours)
    assert answer.headers["content-type"] == "application/json"
    assert [o["id"] for o in answer.json()["offers"]] == [o["id"] for o in theirs] == [12, 11]


async def test_create_show_label_stop_and_destroy_as_the_official_client_does(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(market())
    client = VastAI(api_key=API_KEY, server_url=url)
    created = await in_thread(
        client.create_instance, 12, image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", disk=20,
        label="fleetpilot:k:0", onstart_cmd="echo hello", env={"-p 8000:8000": "1", "MODE": "prove"},
    )  # fmt: skip
    assert created["success"] is True and isinstance(created["new_contract"], int)
    instance_id = created["new_contract"]
    [listed] = await in_thread(client.show_instances)  # pages v1; reads start_date and extra_env pairs
    assert listed["id"] == instance_id and listed["label"] == "fleetpilot:k:0"
    assert listed["extra_env"]["MODE"] == "prove" and listed["onstart"] == "echo hello"
    shown = await in_thread(client.show_instance, instance_id)
    assert shown["id"] == instance_id and shown["intended_status"] == "running"
    assert (await in_thread(client.label_instance, instance_id, "fleetpilot:k:1"))["success"] is True
    assert (await in_thread(client.stop_instance, instance_id))["success"] is True
    assert (await in_thread(client.show_instance, instance_id))["intended_status"] == "stopped"
    assert (await in_thread(client.destroy_instance, instance_id))["success"] is True
    assert await in_thread(client.show_instances) == []
    assert await in_thread(client.show_instance, instance_id) is None  # vast: 200 with a null object
    ledger = simulator.world.ledger(sim_clock.now())
    [entry] = ledger.entries
    assert entry.label == "fleetpilot:k:1" and entry.destroyed_at is not None
    assert [c.endpoint for c in simulator.calls] == [
        Endpoint.CREATE, Endpoint.LIST_V1, Endpoint.SHOW, Endpoint.MANAGE, Endpoint.MANAGE, Endpoint.SHOW,
        Endpoint.DESTROY, Endpoint.LIST_V1, Endpoint.SHOW,
    ]  # fmt: skip


async def test_an_interruptible_instance_as_the_official_client_rents_restarts_and_rebids_it(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(market())
    client = VastAI(api_key=API_KEY, server_url=url)
    [offer] = await in_thread(client.search_offers, query="gpu_name=RTX_4090", type="bid", order="dph_total", limit=1)
    assert offer["id"] == 12 and offer["is_bid"] is True and offer["dph_total"] < 0.44  # priced at min_bid
    created = await in_thread(client.create_instance, 12, image="worker:1", disk=20, bid_price=0.3)
    instance_id = created["new_contract"]
    assert simulator.world.instances[instance_id].is_bid is True
    assert (await in_thread(client.change_bid, instance_id, price=0.35))["success"] is True
    assert (await in_thread(client.stop_instance, instance_id))["success"] is True
    assert (await in_thread(client.start_instance, instance_id))["success"] is True
    shown = await in_thread(client.show_instance, instance_id)
    assert (shown["is_bid"], shown["dph_base"], shown["intended_status"]) == (True, 0.35, "running")
    assert [c.endpoint for c in simulator.calls][1:] == [
        Endpoint.CREATE, Endpoint.BID_PRICE, Endpoint.MANAGE, Endpoint.MANAGE, Endpoint.SHOW
    ]  # fmt: skip


async def test_a_taken_offer_and_a_bad_key_answer_as_vast_does(start_vast: StartVast) -> None:
    simulator, url = await start_vast(market())
    simulator.world.take_offer(11)
    client = VastAI(api_key=API_KEY, server_url=url)
    with pytest.raises(requests.HTTPError) as gone:
        await in_thread(client.create_instance, 11, image="x", disk=10)
    taken = gone.value.response
    assert taken is not None and taken.status_code == 404  # the SDK's default cancel_unavail=False
    assert taken.json()["error"] == "no_such_ask"
    stranger = VastAI(api_key="not-the-key", server_url=url)
    with pytest.raises(requests.HTTPError) as refused:
        await in_thread(stranger.show_instances)
    assert refused.value.response is not None and refused.value.response.json()["error"] == "auth_error"


async def test_every_answer_is_json_with_its_content_type(start_vast: StartVast) -> None:
    simulator, url = await start_vast(market())
    async with authed(url) as http:
        answers = [
            await http.post("/api/v0/bundles/", json={}),
            await http.get("/api/v1/instances/"),
            await http.get("/api/v0/instances/12345/", params={"owner": "me"}),
            await http.put("/api/v0/asks/999/", json={"image": "x"}),
        ]
    async with httpx.AsyncClient(base_url=url) as anonymous:
        answers.append(await anonymous.get("/api/v1/instances/"))
    # a refused key: vast often answers 404 with `auth_error` (the simulator's default; 401 is configurable)
    assert [a.status_code for a in answers] == [200, 200, 200, 404, simulator.api.bad_key_status]
    assert all(a.headers["content-type"] == "application/json" for a in answers)
