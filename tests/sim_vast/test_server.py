"""The simulator over real HTTP: the documented endpoints, shapes, errors, auth, rate limits, faults, admin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from shared.clock import SimulatedClock
from shared.processes import free_port, wait_for_port
from sim.vast.scenario import Endpoint, Fate, OfferSpec, Scenario
from tests.helpers import eventually
from tests.sim_vast.harness import API_KEY, StartVast, authed

IMAGE = {"image": "worker:1", "disk": 20}


def offers(*prices: float, gpu: str = "RTX 4090") -> list[OfferSpec]:
    return [OfferSpec(offer_id=100 + i, gpu_model=gpu, price_usd_per_h=p) for i, p in enumerate(prices)]


async def test_search_takes_the_query_syntax_in_a_body_or_in_q(start_vast: StartVast) -> None:
    _, url = await start_vast(Scenario.quiet(offers=offers(0.5, 0.3, 0.4)))
    async with authed(url) as vast:
        body = {"dph_total": {"gte": 0.35}, "order": [["dph_total", "desc"]], "limit": 5}
        answer = await vast.post("/api/v0/bundles/", json=body)
        assert answer.status_code == 200
        assert [(o["id"], o["gpu_name"]) for o in answer.json()["offers"]] == [(100, "RTX 4090"), (102, "RTX 4090")]
        by_q = await vast.get("/api/v0/bundles/", params={"q": json.dumps({"id": {"eq": 101}})})
        assert [o["id"] for o in by_q.json()["offers"]] == [101]
        bad = await vast.post("/api/v0/bundles/", json={"dph_total": {"about": 1}})
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_args" and "dph_total" in bad.json()["msg"]


async def test_create_answers_new_contract_then_410_for_a_rented_offer_and_404_for_an_unknown_one(
    start_vast: StartVast,
) -> None:
    _, url = await start_vast(Scenario.quiet(offers=offers(0.5)))
    async with authed(url) as vast:
        created = await vast.put("/api/v0/asks/100/", json={**IMAGE, "label": "fleetpilot:k:0"})
        assert created.status_code == 200
        assert created.json()["success"] is True and isinstance(created.json()["new_contract"], int)
        again = await vast.put("/api/v0/asks/100/", json=IMAGE)
        assert again.status_code == 410
        assert again.json() | {"msg": ""} == {"success": False, "error": "no_such_ask", "msg": "", "ask_id": 100}
        unknown = await vast.put("/api/v0/asks/999/", json=IMAGE)
        assert unknown.status_code == 404 and unknown.json()["error"] == "no_such_ask"
        no_image = await vast.put("/api/v0/asks/999/", json={"disk": 10})
        assert no_image.status_code == 404  # the offer is checked first, as vast does
        wrong_type = await vast.put("/api/v0/asks/100/", json={"image": "w", "disk": "lots"})
        assert wrong_type.status_code == 400 and "disk" in wrong_type.json()["msg"]


async def test_v1_list_pages_by_25_with_next_token_and_rejects_a_bad_token(start_vast: StartVast) -> None:
    _, url = await start_vast(Scenario.quiet(offers=offers(*([0.5] * 30))))
    async with authed(url) as vast:
        for offer_id in range(100, 130):
            assert (await vast.put(f"/api/v0/asks/{offer_id}/", json={**IMAGE, "label": "l"})).status_code == 200
        params = {"select_filters": "{}", "order_by": json.dumps([{"col": "id", "dir": "asc"}]), "limit": "100"}
        first = (await vast.get("/api/v1/instances/", params=params)).json()
        assert len(first["instances"]) == 25 and first["total_instances"] == 30 and first["next_token"]
        assert first["label_counts"] == {"l": 30}
        second = (await vast.get("/api/v1/instances/", params={**params, "after_token": first["next_token"]})).json()
        assert len(second["instances"]) == 5 and second["next_token"] is None
        ids = [i["id"] for i in first["instances"] + second["instances"]]
        assert ids == sorted(set(ids)) and len(ids) == 30
        small = (await vast.get("/api/v1/instances/", params={"limit": "0"})).json()
        assert len(small["instances"]) == 5  # limit <= 0 becomes 5
        filtered = await vast.get("/api/v1/instances/", params={"select_filters": json.dumps({"id": {"eq": ids[3]}})})
        assert [i["id"] for i in filtered.json()["instances"]] == [ids[3]]
        bad = await vast.get("/api/v1/instances/", params={"after_token": "not-a-token"})
        assert bad.status_code == 400


async def test_v0_list_answers_410_until_switched_back(start_vast: StartVast) -> None:
    _, url = await start_vast(Scenario.quiet(offers=offers(0.5)))
    async with authed(url) as vast:
        await vast.put("/api/v0/asks/100/", json=IMAGE)
        gone = await vast.get("/api/v0/instances/")
        assert gone.status_code == 410 and gone.json()["error"] == "deprecated_endpoint"
        await vast.post("/_sim/api", json={"v0_list": "ok"})
        listed = await vast.get("/api/v0/instances/")
        assert listed.status_code == 200 and len(listed.json()["instances"]) == 1


async def test_show_manage_and_destroy(start_vast: StartVast, sim_clock: SimulatedClock) -> None:
    _, url = await start_vast(Scenario.quiet(offers=offers(0.5), startup={"startup_s": {"min": 600, "max": 600}}))
    async with authed(url) as vast:
        instance_id = (await vast.put("/api/v0/asks/100/", json=IMAGE)).json()["new_contract"]
        sim_clock.advance(600)
        shown = (await vast.get(f"/api/v0/instances/{instance_id}/", params={"owner": "me"})).json()["instances"]
        assert shown["id"] == instance_id and shown["actual_status"] == "running"
        assert shown["intended_status"] == "running" and shown["gpu_name"] == "RTX 4090"
        assert (await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})).json()["success"]
        assert (await vast.put(f"/api/v0/instances/{instance_id}/", json={"label": "renamed"})).status_code == 200
        shown = (await vast.get(f"/api/v0/instances/{instance_id}/")).json()["instances"]
        assert (shown["actual_status"], shown["label"]) == ("stopped", "renamed")
        destroyed = await vast.delete(f"/api/v0/instances/{instance_id}/")
        assert destroyed.status_code == 200 and destroyed.json()["success"] is True
        after = await vast.get(f"/api/v0/instances/{instance_id}/")
        assert after.status_code == 200 and after.json() == {"instances": None}  # vast's 200-with-null
        twice = await vast.delete(f"/api/v0/instances/{instance_id}/")
        assert twice.status_code == 404 and twice.json()["error"] == "no_such_instance"
        manage_gone = await vast.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
        assert manage_gone.status_code == 404


async def test_bad_key_answers_404_auth_error_or_401_when_switched(start_vast: StartVast) -> None:
    simulator, url = await start_vast()
    async with authed(url, api_key="wrong") as wrong, authed(url) as right:
        answer = await wrong.get("/api/v1/instances/")
        assert answer.status_code == 404
        assert answer.json() == {"success": False, "error": "auth_error", "msg": "Invalid user key"}
        await right.post("/_sim/api", json={"bad_key_status": 401})
        assert (await wrong.get("/api/v1/instances/")).status_code == 401
        by_query = await httpx.AsyncClient(base_url=url).get("/api/v1/instances/", params={"api_key": API_KEY})
        assert by_query.status_code == 200
    assert [c.outcome for c in simulator.calls] == ["auth_error", "auth_error", "ok"]


async def test_rate_limits_answer_429_without_retry_after_and_penalise_create(
    start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    simulator, url = await start_vast(Scenario(market=[], offers=offers(0.5, 0.5, 0.5)))
    async with authed(url) as vast:
        assert (await vast.put("/api/v0/asks/100/", json=IMAGE)).status_code == 200
        sim_clock.advance(1.0)
        limited = await vast.put("/api/v0/asks/101/", json=IMAGE)
        assert limited.status_code == 429 and "retry-after" not in limited.headers
        assert limited.text == "API requests too frequent: endpoint threshold=4.5"
        sim_clock.advance(4.0)  # 5 s after the accepted create, but the violation closed it for 12 s
        assert (await vast.put("/api/v0/asks/101/", json=IMAGE)).status_code == 429
        sim_clock.advance(12.5)
        assert (await vast.put("/api/v0/asks/101/", json=IMAGE)).status_code == 200
        await vast.post("/_sim/api", json={"rate_limit_body": "json"})
        sim_clock.advance(0.5)
        json_limited = await vast.put("/api/v0/asks/102/", json=IMAGE)
        assert json_limited.json() == {"detail": "API requests too frequent endpoint threshold=4.5"}
        # other endpoints have their own intervals: a list right now is fine
        assert (await vast.get("/api/v1/instances/")).status_code == 200
    assert [c.status for c in simulator.calls_to(Endpoint.CREATE)] == [200, 429, 429, 200, 429]


async def test_scripted_faults_error_error_after_slow_and_take_offers(start_vast: StartVast) -> None:
    simulator, url = await start_vast(Scenario.quiet(offers=offers(0.5, 0.6, 0.7)))
    async with authed(url) as vast:
        faults = [
            {"endpoint": "create", "kind": "error", "status": 502},
            {"endpoint": "create", "kind": "error_after", "status": 500},
            {"endpoint": "search", "kind": "take_offers", "offer_ids": [102]},
            {"endpoint": "list_v1", "kind": "slow", "delay_wall_s": 0.3},
        ]
        assert len((await vast.post("/_sim/faults", json=faults)).json()) == 4
        refused = await vast.put("/api/v0/asks/100/", json=IMAGE)
        assert refused.status_code == 502 and simulator.world.ledger(simulator.clock.now()).entries == []
        applied = await vast.put("/api/v0/asks/100/", json=IMAGE)
        assert applied.status_code == 500
        assert len(simulator.world.ledger(simulator.clock.now()).entries) == 1  # it happened all the same
        searched = await vast.post("/api/v0/bundles/", json={})
        assert {o["id"] for o in searched.json()["offers"]} == {101, 102}  # the answer was true when sent...
        assert (await vast.put("/api/v0/asks/102/", json=IMAGE)).status_code == 410  # ...then someone rented it
        with pytest.raises(httpx.ReadTimeout):
            await vast.get("/api/v1/instances/", timeout=0.1)
        assert (await vast.get("/_sim/faults")).json() == []
    # the slow answer is logged when it is finally sent, after the client gave up on it
    await eventually(lambda: any(c.outcome == "injected_slow" for c in simulator.calls_to(Endpoint.LIST_V1)))
    assert [c.outcome for c in simulator.calls_to(Endpoint.CREATE)] == ["injected_error", "injected_error", "error"]


async def test_random_server_errors_follow_the_seed(start_vast: StartVast) -> None:
    scenario = Scenario.quiet(seed=3, api={"rate_limits": {}, "server_error_rate": 0.5})
    simulator, url = await start_vast(scenario)
    async with authed(url) as vast:
        first = [(await vast.get("/api/v1/instances/")).status_code for _ in range(20)]
        await vast.post("/_sim/reset")
        second = [(await vast.get("/api/v1/instances/")).status_code for _ in range(20)]
    assert first == second
    assert 3 <= sum(status >= 500 for status in first) <= 17
    assert len(simulator.calls) == 20  # reset clears the log


async def test_admin_routes_ledger_clock_fates_instance_view(start_vast: StartVast) -> None:
    scenario = Scenario.quiet(offers=offers(0.5, 0.5), startup={"startup_s": {"min": 100, "max": 100}})
    simulator, url = await start_vast(scenario)
    machine_id = simulator.world.offers[101].machine_id
    async with authed(url) as vast:
        await vast.post(f"/_sim/machines/{machine_id}/fate", json={"fate": "exit_error"})
        healthy = (await vast.put("/api/v0/asks/100/", json={**IMAGE, "env": {"A": "1"}})).json()["new_contract"]
        broken = (await vast.put("/api/v0/asks/101/", json=IMAGE)).json()["new_contract"]
        await vast.post("/_sim/clock", json={"seconds": 3600})
        view = (await vast.get(f"/_sim/instances/{broken}")).json()
        assert view["fate"] == Fate.EXIT_ERROR and view["actual_status"] == "exited"
        assert (await vast.get(f"/_sim/instances/{healthy}")).json()["container_env"]["A"] == "1"
        ledger = (await vast.get("/_sim/ledger")).json()
        assert {e["instance_id"] for e in ledger["entries"]} == {healthy, broken}
        assert ledger["peak_instances"] == 2 and ledger["total_cost_usd"] > 0
        calls = (await vast.get("/_sim/calls")).json()
        assert [c["endpoint"] for c in calls] == ["create", "create"]
        assert (await vast.post("/_sim/offers/100/take")).status_code == 404  # already rented
        reset = await vast.post("/_sim/reset", content=Scenario.quiet(offers=offers(0.9)).model_dump_json())
        assert reset.json() == {"reset": True, "offers": 1}


def test_fleetpilot_sim_vast_serves_a_scenario_file(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("seed: 1\nmarket: []\noffers:\n  - {offer_id: 42, gpu_model: RTX 5090, price_usd_per_h: 0.43}\n")
    port = free_port()
    command = [sys.executable, "-m", "services.cli.main", "sim", "vast", "--port", str(port), "--api-key", "cli-key"]
    process = subprocess.Popen(
        [*command, "--scenario", str(path), "--speed", "60", "--log-level", "warning"],
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, 20.0)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer cli-key"}) as vast:
            found = vast.post("/api/v0/bundles/", json={}).json()["offers"]
            assert [(o["id"], o["gpu_name"], o["dph_base"]) for o in found] == [(42, "RTX 5090", 0.43)]
            assert vast.get("/_sim/health").json()["ok"] is True
    finally:
        process.terminate()
        output = process.communicate(timeout=10)[0].decode()
    assert "cli-key" not in output
