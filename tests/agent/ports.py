"""The agent's tests act through `DryRunPorts`: a test double of the decider's port (not of NATS, Redis or
Ollama) whose `act` runs the decider's real guardrails and records instead of publishing."""

from __future__ import annotations

from evaluation.agent.dryrun import DryRunPorts
from services.decider.advisor import RunInputs
from shared.settings import Settings
from tests.agent.builders import run_inputs


def guarded_ports(
    settings: Settings, inputs: RunInputs | None = None, *, offers_per_query: int = 8, offer_note: str = ""
) -> DryRunPorts:
    """For runs on `inputs` (default: `run_inputs()`)."""
    return DryRunPorts.for_inputs(
        settings, inputs or run_inputs(), offers_per_query=offers_per_query, offer_note=offer_note
    )
