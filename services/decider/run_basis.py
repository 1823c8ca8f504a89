"""What one run decides from, read once at its start: its triggers, the inputs, the commands still in flight and
the operator's directives in force. Its first plan and the re-plan after a degraded advisor both rest on it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.decider.decision import answers_only
from services.decider.directive_store import InForce
from services.decider.guardrails import FleetLedger, GuardrailConfig, SentLaunch, SentRemoval
from services.decider.inputs import RunData
from services.decider.policy import Policy
from services.decider.step import RunPlan, plan_run
from shared.contract import TriggerRef


@dataclass(frozen=True)
class RunBasis:
    run_id: str
    triggers: tuple[TriggerRef, ...]
    started_at: datetime
    data: RunData
    sent: list[SentLaunch]  # launches published within the last hour
    removals: list[SentRemoval]  # stops and destroys sent recently
    in_force: InForce

    @property
    def answer_only(self) -> bool:
        return answers_only(self.triggers)

    @property
    def stale_inputs(self) -> str | None:
        """How the inputs are stale, in words, when they are."""
        data = self.data
        return f"signal {data.signal_freshness}, snapshot {data.snapshot_freshness}" if data.stale else None

    def plan(
        self,
        policy: Policy,
        guardrails: GuardrailConfig,
        run_id: str,
        *,
        ledger: FleetLedger | None = None,
        launched_this_run: int = 0,
    ) -> RunPlan:
        """The step on this basis. `ledger` and `launched_this_run`: a re-plan starts from what the run already did
        (the removals in flight then live in that ledger)."""
        return plan_run(
            self.data.signal,
            self.data.snapshot,
            self.sent,
            self.started_at,
            policy,
            guardrails,
            run_id=run_id,
            stale_inputs=self.stale_inputs,
            answer_only=self.answer_only,
            ledger=ledger,
            launched_this_run=launched_this_run,
            removals=self.removals,
            directives=self.in_force.directives,
        )
