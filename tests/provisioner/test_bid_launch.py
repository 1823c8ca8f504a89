"""Interruptible launches over real HTTP: each bid slot is created with an explicit price from the offer's
min_bid (never implicit: vast rents a create without a price on-demand), the rest on-demand."""

from __future__ import annotations

import pytest
from nats.js import JetStreamContext
from pydantic import ValidationError

from services.provisioner.launching import Launching
from services.provisioner.ranking import RankedOffer
from services.provisioner.vast_models import VastOffer
from shared.clock import SimulatedClock
from shared.contract import InstanceState, LaunchInstances, LaunchReason
from shared.settings import Settings
from tests.provisioner.service_harness import (
    NOW,
    OFFER_A,
    OFFER_A2,
    BusRecorder,
    market_scenario,
    running_provisioner,
    send,
)
from tests.sim_vast.harness import StartVast


def launch(key: str, count: int, interruptible: int, bid_markup: float = 0.2) -> LaunchInstances:
    return LaunchInstances(
        occurred_at=NOW, source="decider", idempotency_key=key, requested_by="policy", count=count,
        launch_priority="normal", reason=LaunchReason.FORECAST, interruptible=interruptible, bid_markup=bid_markup,
    )  # fmt: skip


def test_a_launch_cannot_ask_for_more_interruptible_machines_than_it_launches() -> None:
    with pytest.raises(ValidationError, match="interruptible: at most count"):
        launch("launch-too-many", 1, interruptible=2)


async def test_bid_slots_carry_a_price_from_min_bid_and_the_rest_rent_on_demand(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-bids", 2, interruptible=1))
        result = await bus.result_for("launch-bids")
    assert result.outcome == "done", result.detail
    entries = {e.offer_id: e for e in simulator.world.ledger(sim_clock.now()).entries}
    # offer A (0.48 $/h on-demand, min_bid 0.24): bid at 0.24 × 1.2; A2 rented on-demand at 0.49
    assert entries[OFFER_A].is_bid and entries[OFFER_A].dph_total == pytest.approx(0.288)
    assert not entries[OFFER_A2].is_bid and entries[OFFER_A2].dph_total == pytest.approx(0.49)
    requested = {o.instance_id: o for o in bus.observed if o.state is InstanceState.REQUESTED}
    assert requested[entries[OFFER_A].instance_id].price_usd_per_h == pytest.approx(0.288)  # budgeted at its bid
    # fleet learns which instances are bids (vast's `is_bid`), to set later bids from how the market treats them
    assert requested[entries[OFFER_A].instance_id].interruptible
    assert not requested[entries[OFFER_A2].instance_id].interruptible


async def test_a_bid_is_never_above_the_on_demand_price(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-dear-bid", 1, interruptible=1, bid_markup=1.0))
        assert (await bus.result_for("launch-dear-bid")).outcome == "done"
    [entry] = simulator.world.ledger(sim_clock.now()).entries
    assert entry.is_bid and entry.dph_total == pytest.approx(0.48)  # min_bid × 2 = the on-demand price


def test_a_bid_that_rounds_to_nothing_rents_the_slot_on_demand() -> None:
    """A min_bid of 1e-7 $/h rounded the bid to 0.0: the client refused it with a ValueError that no handler
    answered, and the launch command crashed at every delivery. Such a floor means nothing: the slot is rented
    on-demand, at the price ranking and the budget already took it at."""
    command = launch("launch-tiny-bid", 2, interruptible=2)
    tiny, sane = (
        RankedOffer(
            VastOffer(id=offer_id, gpu_name="RTX 4090", dph_total=0.5, min_bid=min_bid), 120.0, 1.0, 0.5 / 120.0
        )
        for offer_id, min_bid in ((1, 1e-7), (2, 0.25))
    )
    assert Launching._bid_for(command, 0, tiny) is None
    assert Launching._bid_for(command, 1, sane) == pytest.approx(0.3)
