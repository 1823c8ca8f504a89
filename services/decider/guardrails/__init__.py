"""Hard guardrails: every action from the policy or the agent passes here before it becomes a command.

Pure: a `FleetLedger` (what the guardrails know) and an action in, a `GuardrailVerdict` and the updated ledger
out. A launch that only partly fits is trimmed (allowed, with the rule that trimmed it); anything else that
breaks a rule is refused.

The package's modules: `rules` (the rules, their configuration, the verdict), `ledger` (what the guardrails know),
and one module per kind of action: `launch`, `resume`, `removal`.
"""

from __future__ import annotations

from datetime import datetime

from services.decider.guardrails.launch import check_launch, worst_price_usd_per_h
from services.decider.guardrails.ledger import (
    RATE_WINDOW_S,
    REMOVAL_IN_FLIGHT_S,
    FleetLedger,
    SentLaunch,
    SentRemoval,
    demand_present,
    ledger_from,
    removals_in_flight,
    unobserved_launches,
)
from services.decider.guardrails.removal import REMOVABLE_STATES, check_removal
from services.decider.guardrails.resume import check_resume
from services.decider.guardrails.rules import GuardrailConfig, GuardrailRule, exclusion_key, verdict
from shared.contract import Action, GuardrailVerdict, LaunchInstances, ResumeInstance

__all__ = [
    "RATE_WINDOW_S",
    "REMOVABLE_STATES",
    "REMOVAL_IN_FLIGHT_S",
    "FleetLedger",
    "GuardrailConfig",
    "GuardrailRule",
    "SentLaunch",
    "SentRemoval",
    "check",
    "demand_present",
    "exclusion_key",
    "ledger_from",
    "removals_in_flight",
    "unobserved_launches",
    "worst_price_usd_per_h",
]


def check(
    action: Action, ledger: FleetLedger, now: datetime, config: GuardrailConfig
) -> tuple[GuardrailVerdict, FleetLedger]:
    """The verdict on one action, and the ledger as it stands if the action is carried out."""
    if ledger.stale:
        return verdict(
            action, False, GuardrailRule.STALE_DATA, "demand signal or fleet snapshot is stale or missing"
        ), ledger
    if isinstance(action, LaunchInstances):
        return check_launch(action, ledger, now, config)
    if isinstance(action, ResumeInstance):
        return check_resume(action, ledger, config)
    return check_removal(action, ledger, config)
