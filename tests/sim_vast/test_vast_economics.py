"""vast.ai's economics in the simulator, over real HTTP: billing by state, stop/start and a GPU taken meanwhile,
interruptible bids (outbid pauses, resumes, the bid_price endpoint, the create without a price), image pulls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from shared.clock import SimulatedClock
from sim.vast.scenario import Endpoint, OfferSpec, Scenario
from sim.vast.world import VastWorld
from tests.sim_vast.harness import StartVast, authed

IMAGE = {"image": "worker:1", "disk": 20}
TEN_MINUTES = {"startup_s": {"min": 600, "max": 600}}
STORAGE_USD_PER_H = 0.73 * 20 / 730  # 20 GB at 0.73 $/GB/month


def offer(offer_id: int, price: float = 0.5, **kw: Any) -> OfferSpec:
    return OfferSpec(offer_id=offer_id, gpu_model="RTX 4090", price_usd_per_h=price, **kw)


def quiet(*offers: OfferSpec, **overrides: Any) -> Scenario:
    billing = {"storage_usd_per_gb_month": 0.73, **overrides.pop("billing", {})}
    return Scenario.quiet(
        offers=list(offers), startup={**TEN_MINUTES, **overrides.pop("startup", {})}, billing=billing, **overrides
    )


async def row(vast: httpx.AsyncClient, instance_id: int) -> dict[str, Any]:
    shown = await vast.get(f"/api/v0/instances/{instance_id}/", params={"owner": "me"})
    assert shown.status_code == 200
    found: dict[str, Any] = shown.json()["instances"]
    return found


async def entry(vast: httpx.AsyncClient, instance_id: int) -> dict[str, Any]:
    ledger = (await vast.get("/_sim/ledger")).json()
    [found] = [e for e in ledger["entries"] if e["instance_id"] == instance_id]
    return found


async def rent(vast: httpx.AsyncClient, offer_id: int, **body: Any) -> int:
    answer = await vast.put(f"/api/v0/asks/{offer_id}/", json={**IMAGE, **body})
    assert answer.status_code == 200, answer.text
    new_contract: int = answer.json()["new_contract"]
    return new_contract


async def test_a_stopped_instance_stays_listed_and_pays_storage_only_until_started_again(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    _, url = await start_vast(quiet(offer(100, 0.5)))
    async with authed(url) as vast:
        instance_id = await rent(vast, 100)
        sim_clock.advance(600 + 3600)
        assert (await row(vast, instance_id))["actual_status"] == "running"
        assert (await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})).json()["success"]
        at_stop = await entry(vast, instance_id)
        assert at_stop["gpu_billed_s"] == pytest.approx(600 + 3600 - 60)  # from the end of `created` (no pull)
        assert (await vast.get("/_sim/ledger")).json()["committed_usd_per_h"] == pytest.approx(STORAGE_USD_PER_H)
        sim_clock.advance(5 * 3600)
        stopped = await row(vast, instance_id)
        assert (stopped["actual_status"], stopped["intended_status"], stopped["cur_state"]) == ("stopped",) * 3
        listed = (await vast.get("/api/v1/instances/")).json()["instances"]
        assert [i["id"] for i in listed] == [instance_id]  # the disk is kept: still an instance of the account
        parked = await entry(vast, instance_id)
        assert parked["gpu_billed_s"] == at_stop["gpu_billed_s"]
        assert parked["storage_billed_s"] - at_stop["storage_billed_s"] == pytest.approx(5 * 3600)
        assert parked["cost_usd"] - at_stop["cost_usd"] == pytest.approx(5 * STORAGE_USD_PER_H, abs=1e-5)

        assert (await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})).json()["success"]
        sim_clock.advance(119)
        assert (await row(vast, instance_id))["actual_status"] == "loading"  # restart_s, the image on disk
        sim_clock.advance(1)
        assert (await row(vast, instance_id))["actual_status"] == "running"
        sim_clock.advance(1800)
        again = await entry(vast, instance_id)
        assert again["gpu_billed_s"] - parked["gpu_billed_s"] == pytest.approx(120 + 1800)
        ledger = (await vast.get("/_sim/ledger")).json()
        assert ledger["committed_usd_per_h"] == pytest.approx(0.5 + STORAGE_USD_PER_H)
        parts = ledger["gpu_cost_usd"] + ledger["storage_cost_usd"] + ledger["bandwidth_cost_usd"]
        assert ledger["total_cost_usd"] == pytest.approx(parts, abs=1e-5)


async def test_a_start_on_a_gpu_rented_meanwhile_waits_in_scheduling_until_it_is_free(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    # the GPU is certainly taken after an hour stopped; the other renter holds it for 30 minutes
    taken = {"gpu_taken_per_stopped_h": 1000, "gpu_free_after_s": {"min": 1800, "max": 1800}}
    _, url = await start_vast(quiet(offer(100), stop_start=taken))
    async with authed(url) as vast:
        instance_id = await rent(vast, 100)
        sim_clock.advance(600)
        await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
        sim_clock.advance(3600)
        before = await entry(vast, instance_id)
        started = await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
        assert started.status_code == 200 and started.json()["success"] is True  # vast accepts it at once
        sim_clock.advance(1799)
        waiting = await row(vast, instance_id)
        assert (waiting["actual_status"], waiting["intended_status"], waiting["cur_state"]) == (
            "stopped", "running", "stopped"
        )  # fmt: skip
        assert waiting["status_msg"].startswith("Scheduling")
        assert (await entry(vast, instance_id))["gpu_billed_s"] == before["gpu_billed_s"]
        sim_clock.advance(1 + 120)  # the GPU is free, then the usual restart
        assert (await row(vast, instance_id))["actual_status"] == "running"


async def test_a_start_whose_gpu_never_comes_back_never_runs(start_vast: StartVast, sim_clock: SimulatedClock) -> None:
    forever = {"gpu_taken_per_stopped_h": 1000, "gpu_free_after_s": None}
    simulator, url = await start_vast(quiet(offer(100), offer(101), stop_start=forever))
    async with authed(url) as vast:
        parked = await rent(vast, 100)
        fresh = await rent(vast, 101, target_state="stopped")  # never ran: its first start takes no GPU back
        sim_clock.advance(600)
        await vast.put(f"/api/v0/instances/{parked}/", json={"state": "stopped"})
        sim_clock.advance(2 * 3600)
        await vast.put(f"/api/v0/instances/{parked}/", json={"state": "running"})
        await vast.put(f"/api/v0/instances/{fresh}/", json={"state": "running"})
        sim_clock.advance(30 * 86_400)
        assert (await row(vast, parked))["actual_status"] == "stopped"
        assert (await row(vast, fresh))["actual_status"] == "running"
        view = (await vast.get(f"/_sim/instances/{parked}")).json()
        assert view["gpu_taken"] is True and view["gpu_free_at"] is None
        assert (await entry(vast, parked))["gpu_billed_s"] == pytest.approx(600 - 60)
    assert simulator.world.instances[parked].destroyed_at is None  # waiting, never failed: the caller decides


async def test_a_stop_while_the_gpu_is_kept_starts_again_at_once(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    _, url = await start_vast(quiet(offer(100), stop_start={"gpu_taken_per_stopped_h": 0}))
    async with authed(url) as vast:
        instance_id = await rent(vast, 100)
        sim_clock.advance(600)
        await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
        sim_clock.advance(10 * 3600)
        await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
        sim_clock.advance(120)
        assert (await row(vast, instance_id))["actual_status"] == "running"


async def test_a_bid_search_prices_at_min_bid_and_a_create_without_a_price_is_on_demand(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(quiet(offer(100, 0.5), offer(101, 0.5)))
    async with authed(url) as vast:
        found = (await vast.post("/api/v0/bundles/", json={"type": "bid", "order": [["id", "asc"]]})).json()
        first = found["offers"][0]
        assert first["is_bid"] is True and first["min_bid"] == pytest.approx(0.25)
        assert first["dph_total"] == pytest.approx(0.25, abs=0.01)  # min_bid plus a little storage
        # the silent trap: the search asked for bids, the create carries no price, vast rents on-demand
        on_demand = await rent(vast, 100)
        bid = await rent(vast, 101, price=0.3)
        sim_clock.advance(600)
        plain, interruptible = await row(vast, on_demand), await row(vast, bid)
        assert (plain["is_bid"], plain["dph_base"]) == (False, pytest.approx(0.5))
        assert (interruptible["is_bid"], interruptible["dph_base"]) == (True, pytest.approx(0.3))
        assert interruptible["min_bid"] == pytest.approx(0.25)
        assert interruptible["dph_total"] == pytest.approx(0.3 + STORAGE_USD_PER_H)
        assert interruptible["actual_status"] == "running"
        assert (await entry(vast, bid))["gpu_cost_usd"] == pytest.approx(0.3 * 540 / 3600, abs=1e-5)
    assert simulator.world.instances[bid].request.price == 0.3


async def test_a_bid_below_min_bid_is_refused_and_a_losing_bid_waits_unless_cancel_unavail(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    _, url = await start_vast(quiet(offer(100, 0.5), offer(101, 0.5), offer(102, 0.5)))
    async with authed(url) as vast:
        low = await vast.put("/api/v0/asks/100/", json={**IMAGE, "price": 0.2})
        assert low.status_code == 400
        assert low.json()["error"] == "invalid_price" and low.json()["ask_id"] == 100 and "0.25" in low.json()["msg"]
        await vast.post("/_sim/bids", json={"gpu_name": "RTX 4090", "share": 0.8})  # others bid 0.40 $/h
        refused = await vast.put("/api/v0/asks/100/", json={**IMAGE, "price": 0.3, "cancel_unavail": True})
        assert refused.status_code == 410 and refused.json()["error"] == "no_such_ask"
        waiting = await rent(vast, 101, price=0.3)  # cancel_unavail defaults to false for a bid: made, paused
        winning = await rent(vast, 102, price=0.45)
        sim_clock.advance(600)
        assert (await row(vast, waiting))["actual_status"] == "stopped"
        assert (await row(vast, winning))["actual_status"] == "running"


async def test_an_outbid_instance_pauses_keeping_its_disk_and_resumes_when_its_bid_is_highest_again(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    _, url = await start_vast(quiet(offer(100, 0.5)))
    async with authed(url) as vast:
        instance_id = await rent(vast, 100, price=0.3)
        sim_clock.advance(600 + 600)
        assert (await row(vast, instance_id))["actual_status"] == "running"
        await vast.post("/_sim/bids", json={"gpu_name": "RTX 4090", "share": 0.7})  # 0.35 $/h beats 0.30
        paused = await row(vast, instance_id)
        assert (paused["actual_status"], paused["intended_status"], paused["cur_state"], paused["next_state"]) == (
            "stopped", "stopped", "stopped", "stopped"
        )  # fmt: skip
        assert paused["status_msg"].startswith("Outbid") and paused["is_bid"] is True
        at_pause = await entry(vast, instance_id)
        sim_clock.advance(2 * 3600)
        during = await entry(vast, instance_id)
        assert during["gpu_billed_s"] == at_pause["gpu_billed_s"]  # paused: storage only
        assert during["storage_billed_s"] - at_pause["storage_billed_s"] == pytest.approx(2 * 3600)
        await vast.post("/_sim/bids", json={"gpu_name": "RTX 4090", "share": 0.5})  # 0.25 $/h: ours is highest
        sim_clock.advance(120)
        resumed = await row(vast, instance_id)
        assert (resumed["actual_status"], resumed["intended_status"]) == ("running", "running")
        await vast.post("/_sim/bids", json={"gpu_name": "RTX 4090", "share": 1.0})  # an on-demand renter
        assert (await row(vast, instance_id))["actual_status"] == "stopped"


async def test_the_bid_price_endpoint_changes_the_bid_and_its_billing(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(quiet(offer(100, 0.5), offer(101, 0.5)))
    async with authed(url) as vast:
        bid = await rent(vast, 100, price=0.3)
        on_demand = await rent(vast, 101)
        sim_clock.advance(600)
        await vast.post("/_sim/bids", json={"gpu_name": "RTX 4090", "share": 0.7})
        assert (await row(vast, bid))["actual_status"] == "stopped"
        raised = await vast.put(f"/api/v0/instances/bid_price/{bid}/", json={"client_id": "me", "price": 0.4})
        assert raised.status_code == 200 and raised.json() == {"success": True}
        shown = await row(vast, bid)
        assert shown["dph_base"] == pytest.approx(0.4) and shown["dph_total"] == pytest.approx(0.4 + STORAGE_USD_PER_H)
        before = await entry(vast, bid)
        sim_clock.advance(120 + 3600)
        assert (await row(vast, bid))["actual_status"] == "running"
        after = await entry(vast, bid)
        assert after["gpu_cost_usd"] - before["gpu_cost_usd"] == pytest.approx(0.4 * (120 + 3600) / 3600, abs=1e-5)

        low = await vast.put(f"/api/v0/instances/bid_price/{bid}/", json={"client_id": "me", "price": 0.1})
        assert low.status_code == 400 and low.json()["error"] == "invalid_price"
        huge = await vast.put(f"/api/v0/instances/bid_price/{bid}/", json={"client_id": "me", "price": 33})
        assert huge.status_code == 400 and huge.json()["error"] == "invalid_args"
        fixed = await vast.put(f"/api/v0/instances/bid_price/{on_demand}/", json={"client_id": "me", "price": 0.4})
        assert fixed.status_code == 400 and "cannot change" in fixed.json()["msg"]  # the type is fixed at rent
        unknown = await vast.put("/api/v0/instances/bid_price/999/", json={"client_id": "me", "price": 0.4})
        assert unknown.status_code == 404 and unknown.json()["error"] == "no_such_instance"
    assert [c.status for c in simulator.calls_to(Endpoint.BID_PRICE)] == [200, 400, 400, 400, 404]


async def test_startup_follows_the_link_and_is_shorter_on_a_machine_that_ran_the_image(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    # 20 GB at 100 Mb/s: 1600 s of pull on top of the ten minutes
    scenario = quiet(offer(100, inet_down_mbps=100), offer(200, inet_down_mbps=1000), startup={"image_gb": 20})
    _, url = await start_vast(scenario)
    async with authed(url) as vast:
        slow = await rent(vast, 100)
        fast = await rent(vast, 200)
        views = {i: (await vast.get(f"/_sim/instances/{i}")).json() for i in (slow, fast)}
        assert views[slow]["startup_s"] == pytest.approx(600 + 1600) and views[slow]["image_cached"] is False
        assert views[fast]["startup_s"] == pytest.approx(600 + 160)
        sim_clock.advance(60 + 1599)  # the pull starts after `created`
        assert (await row(vast, slow))["status_msg"].startswith("Pulling image")
        sim_clock.advance(1)
        assert (await row(vast, slow))["status_msg"].startswith("Image worker:1 on disk")
        sim_clock.advance(540)
        assert (await row(vast, slow))["actual_status"] == "running"
        for instance_id in (slow, fast):
            await vast.delete(f"/api/v0/instances/{instance_id}/")  # each machine returns, its docker cache kept
        again = await rent(vast, 100)
        other_image = await rent(vast, 200, image="worker:2")
        view = (await vast.get(f"/_sim/instances/{again}")).json()
        assert view["image_cached"] is True and view["startup_s"] == pytest.approx(600)
        sim_clock.advance(600)
        assert (await row(vast, again))["actual_status"] == "running"
        assert (await vast.get(f"/_sim/instances/{other_image}")).json()["image_cached"] is False


async def test_the_image_pull_is_billed_per_gb_downloaded_at_inet_down_cost(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    link = {"inet_down_mbps": 100, "inet_down_cost_usd_per_gb": 0.01}
    _, url = await start_vast(quiet(offer(100, **link), startup={"image_gb": 20}))
    async with authed(url) as vast:
        instance_id = await rent(vast, 100)
        sim_clock.advance(60 + 800)  # half the 1600 s pull, after `created`
        half = await entry(vast, instance_id)
        assert half["download_gb"] == pytest.approx(10) and half["bandwidth_cost_usd"] == pytest.approx(0.1)
        assert half["gpu_billed_s"] == 0  # pulling: no GPU charge
        sim_clock.advance(3600)
        done = await entry(vast, instance_id)
        assert done["download_gb"] == pytest.approx(20) and done["bandwidth_cost_usd"] == pytest.approx(0.2)
        assert done["gpu_billed_s"] == pytest.approx(60 + 800 + 3600 - 60 - 1600)
        parts = done["gpu_cost_usd"] + done["storage_cost_usd"] + done["bandwidth_cost_usd"]
        assert done["cost_usd"] == pytest.approx(parts, abs=1e-6)
        await vast.delete(f"/api/v0/instances/{instance_id}/")
        cached = await rent(vast, 100)
        sim_clock.advance(3600)
        assert (await entry(vast, cached))["download_gb"] == 0


def test_the_competing_bid_walks_per_gpu_model_with_the_seed_and_stays_in_bounds() -> None:
    scenario = Scenario(
        seed=3,
        market=[{"gpu_model": "RTX 4090", "count": 3}, {"gpu_model": "RTX 3090", "count": 3}],
        bids={"volatility_per_h": 0.5, "share_bounds": {"min": 0.3, "max": 1.1}},
    )
    t0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    one, two = VastWorld(scenario, t0), VastWorld(scenario, t0)
    start = dict(one.bid_levels.shares)
    assert set(start) == {"RTX 4090", "RTX 3090"}
    seen = []
    for hour in range(1, 25):
        one.advance(t0 + timedelta(hours=hour))
        seen.append(dict(one.bid_levels.shares))
    two.advance(t0 + timedelta(hours=24))
    assert one.bid_levels.shares == two.bid_levels.shares  # the same ticks however the time is asked about
    assert all(0.3 <= share <= 1.1 for shares in seen for share in shares.values())
    assert {round(s["RTX 4090"], 6) for s in seen} != {round(start["RTX 4090"], 6)}  # it moves
    other = VastWorld(scenario.model_copy(update={"seed": 4}), t0)
    assert other.bid_levels.shares != start
