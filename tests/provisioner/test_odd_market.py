"""What vast.ai lists that makes no sense (a bandwidth price past any meaning, a charge row that cannot be read) is
left out, logged and counted, or makes the answer partial: the rest of the answer is used, nothing crashes, and an
amount that cannot be read is unknown, never $0. Over real NATS and the simulator over real HTTP."""

from __future__ import annotations

import asyncio
import math
from datetime import datetime
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from shared.clock import SimulatedClock
from shared.contract import RefusalRule
from shared.settings import Settings
from sim.vast.scenario import Endpoint, OfferSpec
from tests.provisioner.service_harness import (
    MARKET,
    OFFER_A,
    OFFER_A2,
    OFFER_B,
    OFFER_C,
    BusRecorder,
    market_scenario,
    running_provisioner,
    send,
)
from tests.provisioner.test_charges import cli
from tests.provisioner.test_service import ask_offers, launch
from tests.sim_vast.harness import StartVast


def market_with_bandwidth_price(offer_id: int, usd_per_gb: float) -> list[OfferSpec]:
    return [
        spec.model_copy(update={"inet_down_cost_usd_per_gb": usd_per_gb}) if spec.offer_id == offer_id else spec
        for spec in MARKET
    ]


async def test_an_offer_whose_pull_alone_breaks_the_daily_cap_is_left_out_and_the_others_are_rented(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    """B's host asks 50 $/GB: a 10 GB pull is $500, over the day's $480 on its own. A launch of four refused all
    four for it; now B is left out and the three others are rented."""
    simulator, url = await start_vast(market_scenario(offers=market_with_bandwidth_price(OFFER_B, 50.0)))
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-dear-pull", 4))
        result = await bus.result_for("launch-dear-pull")
    rented = {entry.offer_id for entry in simulator.world.ledger(sim_clock.now()).entries}
    assert rented == {OFFER_A, OFFER_A2, OFFER_C}
    assert len(result.instance_ids) == 3
    # three acceptable offers for four instances: what the market holds is rented, the shortfall said
    assert result.outcome == "failed" and result.refusal_rule is RefusalRule.NO_OFFER, result.detail
    assert "launched 3 of 4" in result.detail and "1 more left out: each one's image pull" in result.detail


async def test_an_offer_priced_past_meaning_is_left_out_of_the_offer_list_which_stays_readable(
    settings: Settings, nc: NatsClient, start_vast: StartVast, sim_clock: SimulatedClock
) -> None:
    """1e308 $/GB made the expected $/task inf, published as null: the decider could not read the list at all."""
    _, url = await start_vast(market_scenario(offers=market_with_bandwidth_price(OFFER_A, 1e308)))
    async with running_provisioner(settings, sim_clock, url) as service:
        offers = await ask_offers(nc, settings)  # validated as the decider reads it
        registry = service.context.metrics.registry
        skipped = registry.get_sample_value("fleetpilot_vast_rows_skipped_total", {"endpoint": "search"})
    assert offers.error is None
    assert [o.offer_id for o in offers.offers] == [OFFER_A2, OFFER_B, OFFER_C]
    assert all(math.isfinite(o.expected_usd_per_task) for o in offers.offers)
    assert skipped == 1


BAD_CHARGE_ROWS: list[dict[str, Any]] = [
    {"amount": "nan"},  # read as $0 by max(0, nan)
    {"amount": "inf"},  # published as null: the reply could not be read
    {"timestamp": "nan"},
    {"timestamp": 1.7e12},  # milliseconds: the year 55840
    {"timestamp": -1e12},
]


async def test_unreadable_charge_rows_make_the_cost_partial_never_zero_nor_a_crash(
    settings: Settings,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    simulator, url = await start_vast(market_scenario())
    world_rows = simulator.world.charge_rows

    def rows_with_odd_ones(now: datetime, since: datetime | None = None) -> list[dict[str, Any]]:
        rows = world_rows(now, since)
        return [*rows, *({**rows[0], **odd} for odd in BAD_CHARGE_ROWS)]

    monkeypatch.setattr(simulator.world, "charge_rows", rows_with_odd_ones)
    async with running_provisioner(settings, sim_clock, url) as service:
        await send(js, settings, "launch", launch("launch-charged", 1))
        assert (await bus.result_for("launch-charged")).outcome == "done"
        sim_clock.advance(3 * 3600)
        simulator.world.advance(sim_clock.now())
        code, out, err = await asyncio.to_thread(cli, settings, "cost", "--since", f"{sim_clock.now():%Y-%m-%d}")
        registry = service.context.metrics.registry
        skipped = registry.get_sample_value("fleetpilot_vast_rows_skipped_total", {"endpoint": "invoices"})
    assert simulator.calls_to(Endpoint.INVOICES)  # answered from vast's rows, not for want of an answer
    # the rows read are shown, the exit code and one line say the cost is partial
    assert code == 1 and "$" in out, out
    [line] = err.strip().splitlines()
    assert f"PARTIAL: {len(BAD_CHARGE_ROWS)} of vast.ai's" in line and "at least the above, not the whole" in line
    assert skipped == len(BAD_CHARGE_ROWS)
