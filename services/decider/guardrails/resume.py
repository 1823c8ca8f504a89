"""The resume guardrails: only a machine we parked, on a GPU model and host no directive excludes, within budget."""

from __future__ import annotations

from dataclasses import replace

from services.decider.guardrails.ledger import FleetLedger
from services.decider.guardrails.rules import GuardrailConfig, GuardrailRule, by_directive, exclusion_key, verdict
from shared.contract import GuardrailVerdict, InstanceState, LaunchReason, ResumeInstance

S = InstanceState


def check_resume(
    action: ResumeInstance, ledger: FleetLedger, config: GuardrailConfig
) -> tuple[GuardrailVerdict, FleetLedger]:
    """A resume is budgeted like a launch at the machine's full $/h (less the storage it already commits); it
    adds no instance, since a parked one is counted already."""
    iid = action.instance_id
    state = ledger.states.get(iid)
    refusal: tuple[GuardrailRule, str] | None = None
    if not isinstance(action.reason, LaunchReason):
        refusal = GuardrailRule.REASON_REQUIRED, f"resume #{iid} needs a reason from LaunchReason"
    elif state is None:
        refusal = GuardrailRule.UNKNOWN_INSTANCE, f"#{iid} is not in the fleet snapshot"
    elif iid in ledger.removed or iid in ledger.resumed:
        refusal = GuardrailRule.ALREADY_REMOVED, f"#{iid} was already acted on in this run"
    elif state is not S.PARKED or iid in ledger.outbid:
        why = "outbid: vast resumes it when its bid wins" if iid in ledger.outbid else f"it is {state.value}"
        refusal = GuardrailRule.NOT_PARKED, f"cannot resume #{iid}: {why}"
    if refusal:
        return verdict(action, False, *refusal), ledger
    if (excluded := _excluded_placement(iid, ledger, config)) is not None:
        directive_id, where = excluded
        text = f"cannot resume #{iid}: {where} is excluded by {by_directive(directive_id)}"
        return verdict(action, False, GuardrailRule.DIRECTIVE, text, directive_id), ledger
    price, committed = ledger.prices.get(iid, (0.0, 0.0))
    after = ledger.committed_usd_per_h - committed + price
    figures = f"committed ${ledger.committed_usd_per_h:.2f} of ${config.budget_usd_per_h:.2f}/h"
    if after > config.budget_usd_per_h + 1e-9:
        text = f"resume #{iid} at ${price:.2f}/h refused by {GuardrailRule.BUDGET.value}: {figures}"
        return verdict(action, False, GuardrailRule.BUDGET, text), ledger
    text = (
        f"resume #{iid} (parked, {action.reason.value}): its kept disk back at ${price:.2f}/h instead of "
        f"${committed:.2f}/h storage; {figures} before, ${after:.2f}/h after"
    )
    updated = replace(ledger, committed_usd_per_h=after, resumed=ledger.resumed | {iid})
    return verdict(action, True, None, text), updated


def _excluded_placement(iid: int, ledger: FleetLedger, config: GuardrailConfig) -> tuple[int | None, str] | None:
    """The directive that excludes this parked machine's GPU model or host, and which of them, if one does."""
    gpu_model, host_id = ledger.placements.get(iid, (None, None))
    if gpu_model is not None and config.excludes_gpu_model(gpu_model):
        return config.directive_of(exclusion_key(gpu_model=gpu_model)), f"its GPU model {gpu_model}"
    if host_id is not None and host_id in config.excluded_host_ids:
        return config.directive_of(exclusion_key(host_id=host_id)), f"its host {host_id}"
    return None
