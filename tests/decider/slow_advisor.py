"""An advisor for the two-process test, plugged in by FLEETPILOT_DECIDER_ADVISOR: it keeps every run (and so the
lock) busy for FLEETPILOT_TEST_ADVISOR_SLEEP_S seconds, long enough to overlap triggers and to be killed mid-run.

With FLEETPILOT_TEST_ADVISOR_SLEEP_FILE set, each run reads its sleep from that file instead: the test lengthens
the run it is about to kill, so that the kill lands mid-run however slowly a loaded machine lets the test reach it
(with one second per run, a stalled test process once killed a run that had just finished)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from services.decider.advisor import AdvisorOutcome, DeciderPorts, RunInputs
from shared.contract import AgentTrace
from shared.service import ServiceContext


class SlowAdvisor:
    def __init__(self, sleep_s: float, sleep_file: Path | None = None) -> None:
        self.sleep_s = sleep_s
        self.sleep_file = sleep_file

    def _sleep_s(self) -> float:
        if self.sleep_file is not None and self.sleep_file.exists():
            return float(self.sleep_file.read_text())
        return self.sleep_s

    async def advise(self, inputs: RunInputs, ports: DeciderPorts) -> AdvisorOutcome:
        sleep_s = self._sleep_s()
        await asyncio.sleep(sleep_s)
        return AdvisorOutcome(trace=AgentTrace(decision=f"waited {sleep_s}s"), status="ok")


def build_advisor(ctx: ServiceContext) -> SlowAdvisor:
    sleep_file = os.environ.get("FLEETPILOT_TEST_ADVISOR_SLEEP_FILE")
    return SlowAdvisor(
        float(os.environ.get("FLEETPILOT_TEST_ADVISOR_SLEEP_S", "0.5")), Path(sleep_file) if sleep_file else None
    )
