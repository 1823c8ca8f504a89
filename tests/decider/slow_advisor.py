"""An advisor for the two-process test, plugged in by FLEETPILOT_DECIDER_ADVISOR: it keeps every run (and so the
lock) busy for FLEETPILOT_TEST_ADVISOR_SLEEP_S seconds, long enough to overlap triggers and to be killed mid-run."""

from __future__ import annotations

import asyncio
import os

from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from shared.contract import AgentTrace
from shared.service import ServiceContext


class SlowAdvisor:
    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        await asyncio.sleep(self.sleep_s)
        return AdvisorOutcome(trace=AgentTrace(decision=f"waited {self.sleep_s}s"), status="ok")


def build_advisor(ctx: ServiceContext) -> SlowAdvisor:
    return SlowAdvisor(float(os.environ.get("FLEETPILOT_TEST_ADVISOR_SLEEP_S", "0.5")))
