"""The world rents in the provisioner's own order (services/provisioner/ranking.rank) and learns as it would:
a machine measured slow, or a host that failed, goes down the list when it is offered again."""

from __future__ import annotations

from dataclasses import replace

from services.provisioner.host_history import HostHistory, IncidentKind
from services.provisioner.ranking import OfferConstraints, ThroughputKnowledge, rank
from sim.vast.scenario import Scenario
from sim.world.engine import Engine
from sim.world.model import (
    EPOCH,
    Launch,
    MachineState,
    Market,
    Offer,
    Remove,
    WorldConfig,
    offers_from_scenario,
)
from sim.world.trace import Trace
from tests.world.conftest import quiet_scenario
from tests.world.scripted import Scripted

REFERENCE_4090 = 120.0


def market_of(*prices: float, machines_per_host: int = 1) -> Market:
    return Market([Offer(i + 1, "RTX 4090", price, REFERENCE_4090, host_id=100 + i // machines_per_host)
                   for i, price in enumerate(prices)])  # fmt: skip


def test_without_history_the_world_rents_in_the_provisioners_order() -> None:
    scenario = Scenario.quiet(market=[{"gpu_model": "RTX 4090", "count": 20}, {"gpu_model": "RTX 5090", "count": 20}])
    offers = offers_from_scenario(scenario)
    provisioners = rank(
        [o.as_vast_offer() for o in offers],
        OfferConstraints(allowed_gpu_models=("RTX 4090", "RTX 5090"), max_price_usd_per_h=10.0, verified_only=False),
        ThroughputKnowledge(),
        HostHistory(),
        EPOCH,
    )
    rented = Market(offers).rent(count=40)
    assert [o.offer_id for o in rented] == [r.offer.id for r in provisioners]


def test_a_machine_measured_slow_goes_behind_its_peers_when_offered_again() -> None:
    market = market_of(0.50, 0.51, 0.52)
    first, second = market.rent(count=2)
    assert (first.offer_id, second.offer_id) == (1, 2)
    market.measured(first, 0.6 * REFERENCE_4090, now_s=3600.0)  # its benchmark: 60 % of the reference
    market.measured(second, REFERENCE_4090, now_s=3600.0)
    market.release(first)
    market.release(second)
    # 2 at its measured 120 tasks/h, 3 (unmeasured) at the model's observed mean of 96, 1 at its own 72
    assert [o.offer_id for o in market.rent(count=3, now_s=7200.0)] == [2, 3, 1]


def test_a_failure_marks_the_machine_and_its_host() -> None:
    market = market_of(0.50, 0.51, 0.52, 0.53, machines_per_host=2)  # hosts: {1, 2}, {3, 4}
    first = market.rent()[0]
    market.failed(first, IncidentKind.VAST_ERROR, instance_id=1, now_s=600.0)
    market.release(first)
    # the failed machine last, its host's other machine behind the clean host's
    assert [o.offer_id for o in market.rent(count=4, now_s=1200.0)] == [3, 4, 2, 1]


def test_an_offer_that_failed_is_not_rented_again_while_clean_ones_are_free() -> None:
    scenario = quiet_scenario(
        market=[{"gpu_model": "RTX 4090", "count": 5, "price_usd_per_h": {"min": 0.60, "max": 0.60}}],
        offers=[{"gpu_model": "RTX 4090", "price_usd_per_h": 0.40, "fate": "exit_error"}],
        startup={"startup_s": {"min": 600, "max": 600}},
    )
    rented: dict[int, int] = {}  # instance id → the offer it was rented from

    def script(view):
        for machine in view.machines:
            rented.setdefault(machine.instance_id, machine.offer.offer_id)
        # the failed machine is given back, so its offer is free again for the second launch
        failed = [Remove(m.instance_id, "destroy", "failed") for m in view.machines if m.state is MachineState.EXITED]
        return [*failed, Launch(1)] if view.now_s in (60.0, 7200.0) else failed

    engine = Engine(Trace.of([0] * 180, "quiet"), Scripted(script), scenario, 0, WorldConfig(initial_machines=0))
    engine.run()
    first, second = (rented[i] for i in sorted(rented))
    cheap_but_failing = 6  # the scenario's one exact offer comes after the five generated ones
    assert first == cheap_but_failing  # at first the cheapest per task
    assert second != cheap_but_failing  # after it exited with an error, a clean one instead


def test_a_startup_is_the_drawn_rest_plus_the_image_pull_and_a_machine_that_ran_the_image_skips_the_pull() -> None:
    scenario = quiet_scenario(
        market=[],
        offers=[{"gpu_model": "RTX 4090", "price_usd_per_h": 0.50, "inet_down_mbps": 100.0}],
        startup={"startup_s": {"min": 600, "max": 600}, "image_gb": 10.0, "cached_pull_share": 0.25},
    )
    startups: dict[int, float] = {}

    def script(view):
        for machine in view.machines:
            if machine.running_s is not None:
                startups.setdefault(machine.instance_id, machine.running_s - machine.created_s)
        done = [Remove(m.instance_id, "destroy") for m in view.machines if m.state is MachineState.PRODUCING]
        return [*done, Launch(1)] if view.now_s in (60.0, 7200.0) else done

    engine = Engine(Trace.of([0] * 180, "quiet"), Scripted(script), scenario, 0, WorldConfig(initial_machines=0))
    engine.run()
    first, second = (startups[i] for i in sorted(startups))
    assert first == 600 + 10 * 8000 / 100  # the whole image over a 100 Mb/s link: 800 s
    assert second == 600 + 0.25 * 10 * 8000 / 100  # the same machine again: only what its cache lacks
    assert engine.market.history.startups[1].seconds == second  # the provisioner's history learned it


def test_an_urgent_launch_rents_the_host_known_to_start_fast_and_a_calm_one_the_cheapest() -> None:
    market = market_of(0.50, 0.52)
    slow, fast = market.rent(count=2)
    market.started(slow, 2.5 * 3600, now_s=3 * 3600.0)
    market.started(fast, 0.5 * 3600, now_s=3 * 3600.0)
    market.release(slow)
    market.release(fast)
    assert market.rent(now_s=4 * 3600.0)[0].offer_id == slow.offer_id  # price first when nothing is urgent
    market.release(slow)
    # over URGENT_HORIZON_H: 0.50 × (2.5 + 2) / 2 = 1.125 against 0.52 × (0.5 + 2) / 2 = 0.65 per task-hour
    assert market.rent(now_s=4 * 3600.0, urgent=True)[0].offer_id == fast.offer_id


def test_the_predictive_policys_emergency_launch_rents_the_offer_that_starts_first() -> None:
    """Nobody serving queued tasks: the decider's emergency launch, ranked as the provisioner ranks it, takes the
    fast link over the cheaper slow one (a 10 GB image: 27 min at 50 Mb/s, 40 s at 2000 Mb/s)."""
    from sim.world.evaluate import POLICY_FACTORIES, default_guardrails

    scenario = quiet_scenario(
        market=[],
        offers=[
            *({"gpu_model": "RTX 4090", "price_usd_per_h": 0.50, "inet_down_mbps": 50.0} for _ in range(8)),
            {"gpu_model": "RTX 4090", "price_usd_per_h": 0.52, "inet_down_mbps": 2000.0},
        ],
        startup={"startup_s": {"min": 600, "max": 600}, "image_gb": 10.0},
    )
    trace = Trace.of([10] * 60 + [0] * 60, "cold")
    world = WorldConfig(initial_machines=0)
    guardrails = default_guardrails(world, scenario, trace)
    engine = Engine(trace, POLICY_FACTORIES["predictive"](guardrails), scenario, 0, world, guardrails=guardrails)
    engine.run()
    first_rented = min(engine.market.history.startups.items(), key=lambda item: item[1].at)[0]
    assert first_rented == 9  # the fast link; a calm launch would have taken a cheaper offer (1-8)


def test_under_a_binding_instance_cap_a_flash_crowd_fills_the_slots_with_the_fastest_machines() -> None:
    """Three slots and a crowd far beyond them: the provisioner's rule for the last slots takes the fast cards,
    not the slow ones that are cheaper per task, whatever policy asked (here target tracking)."""
    from sim.world.evaluate import POLICY_FACTORIES, default_guardrails

    scenario = quiet_scenario(
        market=[],
        offers=[
            *({"gpu_model": "RTX 3090", "price_usd_per_h": 0.20} for _ in range(6)),
            *({"gpu_model": "RTX 5090", "price_usd_per_h": 0.75} for _ in range(3)),
        ],
    )
    trace = Trace.of([0] * 30 + [400] * 120 + [0] * 240, "flash")
    world = WorldConfig(initial_machines=0)
    guardrails = replace(default_guardrails(world, scenario, trace), max_instances=3, budget_usd_per_h=10.0)
    engine = Engine(trace, POLICY_FACTORIES["target-tracking"](guardrails), scenario, 0, world, guardrails=guardrails)
    engine.run()
    rented = {machine.offer.gpu_model for machine in engine.machines.values()}
    assert rented == {"RTX 5090"}, rented
