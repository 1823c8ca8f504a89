"""The provisioner's log says each launch and destroy it carried out: the instance, its GPU and price, and the
command's reason. Commands over real NATS, state in real Redis, vast.ai simulated over HTTP."""

from __future__ import annotations

import logging
import re

import pytest
from nats.js import JetStreamContext

from shared.clock import SimulatedClock
from shared.settings import Settings
from tests.provisioner.service_harness import BusRecorder, market_scenario, running_provisioner, send
from tests.provisioner.test_service import destroy, launch
from tests.sim_vast.harness import StartVast


async def test_each_launch_and_destroy_is_logged_with_price_and_reason(
    settings: Settings,
    js: JetStreamContext,
    start_vast: StartVast,
    sim_clock: SimulatedClock,
    bus: BusRecorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fleetpilot.provisioner")
    _, url = await start_vast(market_scenario())
    async with running_provisioner(settings, sim_clock, url):
        await send(js, settings, "launch", launch("launch-logged", 1))
        launched = await bus.result_for("launch-logged")
        [instance_id] = launched.instance_ids
        await send(js, settings, "destroy", destroy("destroy-logged", instance_id))
        await bus.result_for("destroy-logged")
    lines = [r.getMessage() for r in caplog.records if r.name == "fleetpilot.provisioner"]
    [launch_line] = [line for line in lines if line.startswith("launch done:")]
    # the cheapest RTX 4090 of the market, $0.48/h
    assert re.search(rf"instance {instance_id} \(RTX 4090, \$0\.480/h\); reason backlog, normal", launch_line)
    [destroy_line] = [line for line in lines if line.startswith("destroy done:")]
    assert f"instance {instance_id} (RTX 4090, $0.480/h); reason idle" in destroy_line, destroy_line
