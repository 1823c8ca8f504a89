"""A launch carrying an operator's exclusions: offers of an excluded GPU model or on an excluded host are never
rented, through the provisioner service over real NATS and the vast.ai simulator over HTTP."""

from __future__ import annotations

from nats.js import JetStreamContext

from shared.clock import SimulatedClock
from shared.settings import Settings
from sim.vast.scenario import Endpoint
from tests.provisioner.service_harness import (
    OFFER_B,
    OFFER_C,
    BusRecorder,
    market_scenario,
    running_provisioner,
    send,
)
from tests.provisioner.test_service import launch
from tests.sim_vast.harness import StartVast


async def test_an_excluded_host_is_passed_over_for_the_next_best_offer(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        # host 50 holds the two cheapest RTX 4090 offers per task (A, A2): without it, B on host 60
        await send(js, settings, "launch", launch("launch-nohost", 1, exclude_host_ids=[50]))
        result = await bus.result_for("launch-nohost")
    assert result.outcome == "done", result.detail
    ledger = simulator.world.ledger(sim_clock.now())
    assert [e.offer_id for e in ledger.entries] == [OFFER_B]


async def test_an_excluded_gpu_model_is_never_rented_whatever_its_spelling(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        # the RTX 3090 offer ranks last per task: it is rented only because every 4090 is excluded
        await send(js, settings, "launch", launch("launch-nomodel", 1, exclude_gpu_models=["rtx_4090"]))
        result = await bus.result_for("launch-nomodel")
        assert result.outcome == "done", result.detail
        # a second machine finds no offer left but 4090s: refused, and none of them taken for it
        await send(js, settings, "launch", launch("launch-nomodel-2", 1, exclude_gpu_models=["RTX 4090"]))
        second = await bus.result_for("launch-nomodel-2")
    assert second.outcome == "refused", second.detail
    assert [e.offer_id for e in simulator.world.ledger(sim_clock.now()).entries] == [OFFER_C]


async def test_a_launch_whose_every_model_is_excluded_rents_nothing_and_says_why(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        command = launch("launch-none", 1, gpu_models=["RTX 4090"], exclude_gpu_models=["RTX 4090"])
        await send(js, settings, "launch", command)
        result = await bus.result_for("launch-none")
    assert result.outcome == "refused" and "less the excluded ['RTX 4090']" in result.detail, result.detail
    assert simulator.calls_to(Endpoint.CREATE) == []
