"""The simulated vast.ai world without HTTP: statuses over time, fates, the market's motion, the ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pydantic
import pytest

from sim.vast.query import QueryError, parse_search
from sim.vast.scenario import Fate, OfferSpec, Scenario
from sim.vast.world import CreateRequest, VastApiError, VastWorld

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def world_with(*specs: OfferSpec, **overrides: object) -> VastWorld:
    scenario = Scenario.quiet(offers=list(specs), **overrides)
    return VastWorld(scenario, T0)


def spec(offer_id: int, price: float, *, gpu: str = "RTX 4090", fate: Fate | None = None, **kw: object) -> OfferSpec:
    return OfferSpec(offer_id=offer_id, gpu_model=gpu, price_usd_per_h=price, fate=fate, **kw)


def request(label: str = "fleetpilot:k:0", **kw: object) -> CreateRequest:
    return CreateRequest(image="worker:1", disk=20, label=label, **kw)


FIXED_HOUR = {"startup_s": {"min": 3600, "max": 3600}}


def test_status_goes_null_created_loading_running_on_the_startup_schedule() -> None:
    world = world_with(spec(1, 0.5), startup=FIXED_HOUR)
    instance = world.create(1, request(), T0)
    seen = [world.status(instance, at(s))[0] for s in (5, 30, 61, 3599, 3600, 90_000)]
    assert seen == [None, "created", "loading", "loading", "running", "running"]


def test_stuck_machine_loads_forever_and_exit_error_reports_the_docker_error() -> None:
    world = world_with(spec(1, 0.5, fate=Fate.STUCK_LOADING), spec(2, 0.5, fate=Fate.EXIT_ERROR), startup=FIXED_HOUR)
    stuck = world.create(1, request(), T0)
    broken = world.create(2, request("fleetpilot:k:1"), T0)
    assert world.status(stuck, at(30 * 86_400))[0] == "loading"
    actual, message = world.status(broken, at(3600))
    assert actual == "exited" and "Error" in message
    assert world.status(broken, at(3599))[0] == "loading"


def test_offline_later_runs_then_goes_offline_and_stops_billing_gpu_time() -> None:
    scenario_fates = {"offline_after_s": {"min": 1800, "max": 1800}}
    world = world_with(
        spec(1, 0.6, fate=Fate.OFFLINE_LATER), startup=FIXED_HOUR, fates=scenario_fates,
        billing={"gpu_billed_from": "running"},
    )  # fmt: skip
    instance = world.create(1, request(), T0)
    assert world.status(instance, at(3600 + 1799))[0] == "running"
    assert world.status(instance, at(3600 + 1800))[0] == "offline"
    entry = world.ledger(at(4 * 3600)).entries[0]
    assert entry.gpu_billed_s == pytest.approx(1800)


def test_slow_machines_get_a_throughput_factor_below_one() -> None:
    world = world_with(spec(1, 0.5, fate=Fate.SLOW), spec(2, 0.5), fates={"slow_factor": {"min": 0.5, "max": 0.6}})
    slow = world.create(1, request(), T0)
    healthy = world.create(2, request("fleetpilot:k:1"), T0)
    assert 0.5 <= slow.throughput_factor <= 0.6
    assert healthy.throughput_factor == 1.0


def test_fate_shares_are_drawn_with_the_seed() -> None:
    scenario = Scenario.quiet(
        market=[{"gpu_model": "RTX 4090", "count": 200}],
        fates={"stuck_loading": 0.25, "exit_error": 0.25, "offline_later": 0, "slow": 0},
    )
    world = VastWorld(scenario, T0)
    fates = [world.create(offer_id, request(f"x:{i}"), T0).fate for i, offer_id in enumerate(sorted(world.offers))]
    stuck = fates.count(Fate.STUCK_LOADING) / len(fates)
    exited = fates.count(Fate.EXIT_ERROR) / len(fates)
    assert 0.15 < stuck < 0.35 and 0.15 < exited < 0.35
    again = VastWorld(scenario, T0)
    assert [again.create(o, request(f"x:{i}"), T0).fate for i, o in enumerate(sorted(again.offers))] == fates


def test_ledger_bills_storage_from_creation_and_gpu_from_the_pulled_image_until_stop() -> None:
    world = world_with(spec(1, 0.72), startup=FIXED_HOUR, billing={"storage_usd_per_gb_month": 0.73})
    instance = world.create(1, request(), T0)
    storage_usd_per_h = 0.73 * 20 / 730
    assert instance.dph_total == pytest.approx(0.72 + storage_usd_per_h)
    world.set_state(instance.instance_id, "stopped", at(3 * 3600))
    world.destroy(instance.instance_id, at(5 * 3600))
    entry = world.ledger(at(10 * 3600)).entries[0]
    # no image to pull in a quiet world: the container starts once `created` ends (60 s), and is billed from then
    assert entry.gpu_billed_s == pytest.approx(3 * 3600 - 60)
    assert entry.storage_billed_s == pytest.approx(5 * 3600)
    assert entry.cost_usd == pytest.approx(0.72 * (3 - 60 / 3600) + storage_usd_per_h * 5, rel=1e-6)


def test_ledger_peak_counts_what_was_committed_at_once() -> None:
    world = world_with(spec(1, 0.5), spec(2, 0.4), spec(3, 0.3), billing={"storage_usd_per_gb_month": 0})
    a = world.create(1, request("a"), T0)
    world.create(2, request("b"), at(10))
    world.destroy(a.instance_id, at(20))
    world.create(3, request("c"), at(20))  # same moment as the destroy: not a peak of three
    ledger = world.ledger(at(30))
    assert ledger.peak_instances == 2
    assert ledger.peak_committed_usd_per_h == pytest.approx(0.9)
    assert ledger.live_instances == 2 and ledger.committed_usd_per_h == pytest.approx(0.7)


def test_renting_removes_the_offer_and_destroying_returns_it_under_the_same_id() -> None:
    world = world_with(spec(77, 0.5))
    instance = world.create(77, request(), T0)
    with pytest.raises(VastApiError) as gone:
        world.create(77, request("other"), at(1))
    assert gone.value.status == 410 and gone.value.error == "no_such_ask"
    with pytest.raises(VastApiError) as unknown:
        world.create(78, request("other"), at(1))
    assert unknown.value.status == 404
    world.destroy(instance.instance_id, at(2))
    assert 77 in world.offers


def test_create_checks_image_label_and_disk() -> None:
    world = world_with(spec(1, 0.5, disk_space_gb=30))
    with pytest.raises(VastApiError, match="image"):
        world.create(1, CreateRequest(disk=10), T0)
    with pytest.raises(VastApiError) as too_long:
        world.create(1, request("x" * 257), T0)
    assert too_long.value.error == "label_too_long"
    with pytest.raises(VastApiError, match="disk"):
        world.create(1, CreateRequest(image="w", disk=31), T0)


def test_instance_row_carries_label_env_onstart_and_ports_once_running() -> None:
    world = world_with(spec(1, 0.5), startup=FIXED_HOUR)
    body = request(env={"FLEETPILOT_INSTANCE_LABEL": "fleetpilot:k:0", "-p 8000:8000": "1"}, onstart="bash go.sh")
    instance = world.create(1, body, T0)
    loading = world.instance_row(instance, at(100))
    assert loading["ports"] == {} and loading["onstart"] == "bash go.sh" and loading["label"] == "fleetpilot:k:0"
    assert loading["extra_env"] == [["FLEETPILOT_INSTANCE_LABEL", "fleetpilot:k:0"]]
    running = world.instance_row(instance, at(3600))
    assert set(running["ports"]) == {"22/tcp", "8000/tcp"}
    view = world.sim_view(instance, at(3600))
    assert view["container_env"]["CONTAINER_ID"] == str(instance.instance_id)
    assert view["container_env"]["VAST_CONTAINERLABEL"] == f"C.{instance.instance_id}"


def test_market_moves_in_ticks_deterministically_and_drift_stays_bounded() -> None:
    scenario = Scenario(
        seed=11,
        market=[{"gpu_model": "RTX 4090", "count": 40}],
        dynamics={"price_drift_per_h": 0.5, "max_price_step": 0.01, "taken_by_others_per_h": 6, "new_offers_per_h": 6},
    )
    one, two = VastWorld(scenario, T0), VastWorld(scenario, T0)
    before = {i: o.dph_base for i, o in one.offers.items()}
    for minute in range(1, 61):
        one.advance(at(60 * minute))
    two.advance(at(3600))  # one jump or sixty small steps: the same ticks
    assert {i: o.dph_base for i, o in one.offers.items()} == {i: o.dph_base for i, o in two.offers.items()}
    assert set(one.offers) != set(before)  # some taken by others, some new
    for offer_id, price in before.items():
        if offer_id in one.offers:
            assert abs(one.offers[offer_id].dph_base / price - 1) <= 0.01 * 60 + 1e-9
    other_seed = VastWorld(scenario.model_copy(update={"seed": 12}), T0)
    assert {o.dph_base for o in other_seed.offers.values()} != set(before.values())


def test_search_query_operators_order_and_limit() -> None:
    world = world_with(
        spec(1, 0.5), spec(2, 0.3, gpu="RTX 3090"), spec(3, 0.45, gpu="RTX 5090", verified=False), spec(4, 0.9)
    )
    query = parse_search(
        {"gpu_name": {"in": ["RTX 4090", "RTX 5090"]}, "dph_total": {"lte": 0.8}, "order": [["dph_total", "asc"]]},
        default_limit=64,
    )
    assert [row["id"] for row in world.search(query, T0)] == [3, 1]
    verified = parse_search({"verified": {"eq": True}, "id": {"notin": [1]}, "limit": 1}, default_limit=64)
    # default order: score (dlperf per dollar) descending: the cheap 3090 beats the dear 4090
    assert [row["id"] for row in world.search(verified, T0)] == [2]
    with pytest.raises(QueryError, match="dph_total"):
        parse_search({"dph_total": {"below": 1}}, default_limit=64)


def test_scenario_loads_from_yaml_and_json_and_names_bad_fields(tmp_path: Path) -> None:
    path = tmp_path / "market.yaml"
    path.write_text("seed: 5\nmarket:\n  - gpu_model: RTX 4090\n    count: 3\napi:\n  bad_key_status: 401\n")
    scenario = Scenario.load(path)
    assert scenario.seed == 5 and scenario.market[0].count == 3 and scenario.api.bad_key_status == 401
    json_path = tmp_path / "market.json"
    json_path.write_text(scenario.model_dump_json())
    assert Scenario.load(json_path) == scenario
    path.write_text("fates:\n  stuck_loading: 0.7\n  exit_error: 0.7\n")
    with pytest.raises(pydantic.ValidationError, match="fate shares"):
        Scenario.load(path)
    path.write_text("market:\n  - gpu_model: GTX 9999\n    count: 1\n")
    with pytest.raises(pydantic.ValidationError, match="GTX 9999"):
        Scenario.load(path)
