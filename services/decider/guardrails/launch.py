"""The launch guardrails: directives, the price cap, an emergency's justification, then the instance, budget and
rate limits, which trim a launch that only partly fits."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime

from services.decider.guardrails.ledger import FleetLedger, SentLaunch
from services.decider.guardrails.rules import GuardrailConfig, GuardrailRule, by_directive, exclusion_key, verdict
from shared.contract import DemandState, GuardrailVerdict, LaunchInstances

# the demand states that justify the emergency price cap: nobody completing queued work, or demand that demand's
# own thresholds (sustain_s, max_backlog_drain_h) judged beyond the fleet; anything else is a normal launch
EMERGENCY_STATES = frozenset({DemandState.WORKERS_STALLED, DemandState.UNDER_PROVISIONED})


def check_launch(
    action: LaunchInstances, ledger: FleetLedger, now: datetime, config: GuardrailConfig
) -> tuple[GuardrailVerdict, FleetLedger]:
    if (barred := _directive_launch_refusal(action, now, config)) is not None:
        return barred, ledger
    action = _with_exclusions(action, config)
    downgrade = _unjustified_emergency(action, ledger, config)
    if downgrade:
        lowered = action.max_price_usd_per_h
        if lowered is not None:
            lowered = min(lowered, config.normal_max_price_usd_per_h)
        action = action.model_copy(update={"launch_priority": "normal", "max_price_usd_per_h": lowered})
    price = worst_price_usd_per_h(action, config)
    cap = worst_price_usd_per_h(action.model_copy(update={"max_price_usd_per_h": None}), config)
    if price > cap + 1e-9:
        text = f"max price ${price:.2f}/h is above the {action.launch_priority} cap ${cap:.2f}/h"
        return verdict(action, False, GuardrailRule.PRICE_CAP, text), ledger
    room = {
        GuardrailRule.MAX_INSTANCES: config.max_instances - ledger.instance_count,
        GuardrailRule.BUDGET: math.floor((config.budget_usd_per_h - ledger.committed_usd_per_h) / price + 1e-9),
        GuardrailRule.MAX_LAUNCHES_PER_H: config.max_launches_per_h - ledger.launched_within(now),
    }
    binding = min(room, key=lambda rule: room[rule])
    allowed = max(0, min(action.count, room[binding]))
    figures = (
        f"{ledger.instance_count}/{config.max_instances} instances, committed ${ledger.committed_usd_per_h:.2f}"
        f" of ${config.budget_usd_per_h:.2f}/h at up to ${price:.2f}/h each,"
        f" {ledger.launched_within(now)}/{config.max_launches_per_h} launched this hour"
    )
    # a limit a directive tightened is named by its number
    directive_id = config.directive_of(binding.value) if allowed < action.count else None
    by = binding.value + (f" ({by_directive(directive_id)})" if directive_id is not None else "")
    if allowed == 0:
        text = f"{downgrade}launch {action.count} refused by {by}: {figures}"
        return verdict(action, False, binding, text, directive_id), ledger
    # never the last producers interruptible while tasks wait or arrive: up to the floor of producers kept while
    # queued, machines are launched on-demand (an outbid pause must not leave queued work with nobody)
    cover = max(0, config.min_producers_while_queued - ledger.producing) if ledger.demand_present else 0
    interruptible = min(action.interruptible, max(0, allowed - cover))
    granted = action
    if allowed < action.count or interruptible < action.interruptible:
        granted = action.model_copy(update={"count": allowed, "interruptible": interruptible})
    rule = binding if allowed < action.count else None
    text = f"launch {allowed}" + (f" of {action.count} (trimmed by {by})" if rule else "") + f": {figures}"
    if downgrade:
        text, rule = downgrade + text, rule or GuardrailRule.EMERGENCY_UNJUSTIFIED
    if granted.exclude_gpu_models or granted.exclude_host_ids:
        text += "; excluded: " + ", ".join(
            [*granted.exclude_gpu_models, *(f"host {h}" for h in granted.exclude_host_ids)]
        )
    if action.interruptible:
        text += f"; {interruptible} interruptible" + (
            f" ({action.interruptible} asked: {cover} on-demand first, {ledger.producing} producing)"
            if interruptible < action.interruptible
            else ""
        )
    updated = replace(
        ledger,
        committed_usd_per_h=ledger.committed_usd_per_h + allowed * price,
        instance_count=ledger.instance_count + allowed,
        launches=(*ledger.launches, SentLaunch(action.idempotency_key, now, allowed, price)),
    )
    return verdict(granted, True, rule, text, directive_id), updated


def worst_price_usd_per_h(action: LaunchInstances, config: GuardrailConfig) -> float:
    cap = (
        config.emergency_max_price_usd_per_h
        if action.launch_priority == "emergency"
        else config.normal_max_price_usd_per_h
    )
    return action.max_price_usd_per_h or cap


def _directive_launch_refusal(
    action: LaunchInstances, now: datetime, config: GuardrailConfig
) -> GuardrailVerdict | None:
    """A launch too late to produce before a drain, or naming only excluded GPU models, is refused."""
    if config.no_launch_after is not None and now >= config.no_launch_after:
        directive_id = config.directive_of(GuardrailRule.DIRECTIVE.value)
        text = (
            f"launch {action.count} refused by {by_directive(directive_id)}: a machine launched from "
            f"{config.no_launch_after:%H:%M} UTC could not produce before its drain"
        )
        return verdict(action, False, GuardrailRule.DIRECTIVE, text, directive_id)
    excluded = [m for m in action.gpu_models if config.excludes_gpu_model(m)]
    if action.gpu_models and len(excluded) == len(action.gpu_models):
        directive_id = config.directive_of(exclusion_key(gpu_model=excluded[0]))
        text = f"launch {action.count} refused by {by_directive(directive_id)}: {', '.join(excluded)} excluded"
        return verdict(action, False, GuardrailRule.DIRECTIVE, text, directive_id)
    return None


def _with_exclusions(action: LaunchInstances, config: GuardrailConfig) -> LaunchInstances:
    """The launch as the provisioner gets it: excluded models left out of its wishes, every exclusion carried."""
    if not config.excluded_gpu_models and not config.excluded_host_ids:
        return action
    wanted = [m for m in action.gpu_models if not config.excludes_gpu_model(m)]
    return action.model_copy(
        update={
            "gpu_models": wanted,
            "exclude_gpu_models": sorted({*action.exclude_gpu_models, *config.excluded_gpu_models}),
            "exclude_host_ids": sorted({*action.exclude_host_ids, *config.excluded_host_ids}),
        }
    )


def _unjustified_emergency(action: LaunchInstances, ledger: FleetLedger, config: GuardrailConfig) -> str:
    """Why an emergency launch is not one ("" when it is): the higher cap is for stalled or under-provisioned
    demand alone, whatever a prompt or an operator message says."""
    if action.launch_priority != "emergency" or ledger.demand_state in EMERGENCY_STATES:
        return ""
    state = ledger.demand_state.value if ledger.demand_state else "unknown"
    return (
        f"emergency downgraded to normal (cap ${config.normal_max_price_usd_per_h:.2f}/h): demand is {state}, "
        f"emergency only when {' or '.join(sorted(s.value for s in EMERGENCY_STATES))}; "
    )
