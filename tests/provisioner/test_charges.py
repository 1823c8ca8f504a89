"""`fleetpilot cost` from vast.ai's own charges: the simulator bills each instance per kind and UTC day, the
provisioner answers over NATS with each machine's GPU model, and the command sums them as the ledger does."""

from __future__ import annotations

import asyncio
from datetime import date, timedelta

import pytest
from nats.js import JetStreamContext
from pydantic import ValidationError
from typer.testing import CliRunner

from services.cli.main import app
from services.provisioner.charges import charge_lines
from services.provisioner.vast_models import VastCharge
from shared.clock import SimulatedClock
from shared.settings import Settings
from tests.provisioner.service_harness import BusRecorder, market_scenario, running_provisioner, send
from tests.provisioner.test_service import launch
from tests.sim_vast.harness import StartVast


def cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    env = {"FLEETPILOT_NATS_URL": settings.nats_url, "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


async def test_cost_sums_vasts_charges_per_kind_model_and_machine_across_days(
    settings: Settings, js: JetStreamContext, start_vast: StartVast, sim_clock: SimulatedClock, bus: BusRecorder
) -> None:
    simulator, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-cost", 2))
        ids = (await bus.result_for("launch-cost")).instance_ids
        for _ in range(30):  # a day and a half, the world asked every hour as the provisioner's lists do
            sim_clock.advance(3 * 1800)
            simulator.world.advance(sim_clock.now())
        day = (sim_clock.now() - timedelta(hours=45)).date()  # the day of the launch
        code, out, err = await asyncio.to_thread(cli, settings, "cost", "--since", f"{day:%Y-%m-%d}", "--top", "5")
        ledger = simulator.world.ledger(sim_clock.now())
        code_today, today_only, _ = await asyncio.to_thread(
            cli, settings, "cost", "--since", f"{sim_clock.now():%Y-%m-%d}"
        )
    assert code_today == 0
    assert code == 0, err
    total = sum(e.cost_usd for e in ledger.entries)
    assert f"vast.ai charged ${total:.2f} since {day:%Y-%m-%d} (UTC)" in out
    assert f"gpu ${sum(e.gpu_cost_usd for e in ledger.entries):.2f}" in out.splitlines()[0]
    storage = sum(e.storage_cost_usd for e in ledger.entries)
    assert storage == 0 or f"storage ${storage:.2f}" in out.splitlines()[0]
    assert "RTX 4090" in out and all(f"#{i}" in out for i in ids)
    assert max(len(line) for line in out.splitlines()) <= 80
    # the last day alone: the charges of its hours only, per machine as well
    [first_line, *_] = today_only.splitlines()
    today = float(first_line.split("$")[1].split()[0])
    assert 0 < today < total - 1.0


async def test_cost_without_a_provisioner_is_unknown_never_zero(settings: Settings, js: JetStreamContext) -> None:
    code, out, err = await asyncio.to_thread(cli, settings, "cost")
    assert code == 1 and "unknown, not $0" in err and "$0" not in out


GOOD_CHARGE = {"description": "Instance 1 GPU charge", "timestamp": 1.7e9, "amount": "1.0", "instance_id": 1}


@pytest.mark.parametrize(
    "odd",
    [{"amount": "nan"}, {"amount": "inf"}, {"amount": 1e400}, {"quantity": "inf"}, {"timestamp": "nan"},
     {"timestamp": 1.7e12}, {"timestamp": -1e12}, {"timestamp": 0}],
    ids=["NaN amount", "inf amount", "amount past a float", "inf quantity", "NaN moment", "milliseconds",
         "before 1970", "zero moment"],
)  # fmt: skip
def test_a_charge_row_whose_amount_or_moment_is_no_finite_number_in_range_is_unreadable(odd: dict[str, object]) -> None:
    """A NaN amount read as $0 (max(0, NaN)), an inf one went out as null, and a moment in milliseconds or NaN
    failed the whole reply: such a row does not read as a charge (the client skips and counts it)."""
    with pytest.raises(ValidationError):
        VastCharge.model_validate({**GOOD_CHARGE, **odd})
    [line] = charge_lines([VastCharge.model_validate(GOOD_CHARGE)], {})
    assert (line.amount_usd, line.day) == (1.0, date(2023, 11, 14))
