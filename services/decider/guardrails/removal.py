"""The removal guardrails (drain, stop, destroy): never the last producers while work waits, never a machine the
backlog needs, never one already being removed, and only from the states each removal may touch."""

from __future__ import annotations

import math
from dataclasses import replace

from services.decider.guardrails.ledger import FleetLedger
from services.decider.guardrails.rules import GuardrailConfig, GuardrailRule, verdict
from shared.contract import (
    DestroyInstance,
    DrainInstance,
    GuardrailVerdict,
    InstanceState,
    RemovalReason,
    StopInstance,
)

S = InstanceState

# What each removal may touch. A producing machine is drained first (destroying it would lose the tasks it
# runs); `gone` is not in the snapshot at all.
REMOVABLE_STATES: dict[str, frozenset[InstanceState]] = {
    "drain": frozenset({S.RUNNING, S.REGISTERED, S.BENCHMARKED, S.PRODUCING}),
    # a resuming machine may be parked again while it waits for its GPU
    "stop": frozenset(
        {S.REQUESTED, S.LOADING, S.RUNNING, S.REGISTERED, S.BENCHMARKED, S.DRAINING, S.RESUMING, S.FAILED}
    ),
    # a parked machine is destroyed when its demand did not come back: its storage is then freed too
    "destroy": frozenset(
        {S.REQUESTED, S.LOADING, S.RUNNING, S.REGISTERED, S.BENCHMARKED, S.DRAINING, S.PARKED, S.RESUMING, S.FAILED}
    ),
}
# reasons that mean "we need less", which workers_stalled must never be taken for
SCALE_DOWN_REASONS = frozenset(
    {RemovalReason.IDLE, RemovalReason.OVER_PROVISIONED, RemovalReason.BUDGET, RemovalReason.PARK}
)
# reasons that claim the fleet has too many producers, which a backlog needing them contradicts
NEED_FEWER_REASONS = frozenset({RemovalReason.IDLE, RemovalReason.OVER_PROVISIONED, RemovalReason.PARK})


def check_removal(
    action: StopInstance | DestroyInstance | DrainInstance, ledger: FleetLedger, config: GuardrailConfig
) -> tuple[GuardrailVerdict, FleetLedger]:
    verb, iid = _verb(action), action.instance_id
    state = ledger.states.get(iid)
    refusal: tuple[GuardrailRule, str] | None = None
    if not isinstance(action.reason, RemovalReason):
        refusal = (
            GuardrailRule.REASON_REQUIRED,
            f"{verb} #{iid} needs a reason from RemovalReason, got {action.reason!r}",
        )
    elif state is None:
        refusal = GuardrailRule.UNKNOWN_INSTANCE, f"#{iid} is not in the fleet snapshot"
    elif iid in ledger.removed:
        refusal = GuardrailRule.ALREADY_REMOVED, f"#{iid} was already removed in this run"
    elif (flying := ledger.removals_in_flight.get(iid)) is not None and verb != "drain":
        refusal = (
            GuardrailRule.REMOVAL_IN_FLIGHT,
            f"a {flying.verb} of #{iid} was sent at {flying.sent_at:%H:%M:%S} ({flying.idempotency_key}) and "
            f"the fleet does not show it carried out yet: not ordered again",
        )
    elif action.reason is RemovalReason.BENCH_FAILED and iid not in ledger.bench_failed:
        refusal = (
            GuardrailRule.BENCH_NOT_FAILED,
            f"#{iid}'s benchmark did not fail (a missing report is unknown, not failed): no {verb} for bench_failed",
        )
    elif ledger.workers_stalled and (state is S.PRODUCING or action.reason in SCALE_DOWN_REASONS):
        refusal = (
            GuardrailRule.WORKERS_STALLED,
            f"workers stalled: replace, never {verb} #{iid} ({action.reason.value})",
        )
    elif state is S.PRODUCING and ledger.demand_present and ledger.producing - 1 < config.min_producers_while_queued:
        refusal = (
            GuardrailRule.LAST_PRODUCERS,
            (f"#{iid} is one of the last {ledger.producing} producing machines and tasks are queued or arriving"),
        )
    elif (
        state is S.PRODUCING
        and held_to_the_backlog(action, ledger, config)
        and ledger.producing - 1 < (floor := backlog_floor(ledger, config))
    ):
        refusal = (
            GuardrailRule.BACKLOG_FLOOR,
            f"#{iid}: {ledger.producing} producing, and the backlog of {ledger.backlog_worker_hours:.1f} worker-h "
            f"needs {floor} over the {config.backlog_drain_horizon_h:g} h drain horizon",
        )
    elif state not in REMOVABLE_STATES[verb]:
        refusal = GuardrailRule.REMOVAL_STATE, f"cannot {verb} #{iid} while {state.value}"
    if refusal:
        return verdict(action, False, *refusal), ledger
    assert state is not None
    if isinstance(action, StopInstance) and action.reason is RemovalReason.PARK:
        text = (
            f"park #{iid} ({state.value}): stopped with its disk kept to resume when demand returns, storage "
            f"billed only; {ledger.producing} producing before"
        )
    else:
        text = f"{verb} #{iid} ({state.value}, {action.reason.value}); {ledger.producing} producing before"
    return verdict(action, True, None, text), replace(ledger, removed=ledger.removed | {iid})


def held_to_the_backlog(
    action: StopInstance | DestroyInstance | DrainInstance, ledger: FleetLedger, config: GuardrailConfig
) -> bool:
    """Whether removing a producing machine for this reason must leave the producers the backlog needs.

    A reason is a claim, and only a claim the facts back lifts the floor: the operator's own directive, a benchmark
    the ledger shows failed (checked above), a budget cut while the fleet commits more than the budget. Any other
    reason for a machine fleet says produces (dead, failed, stuck, an operator's request the agent says it
    heard...) is held to it like a claim of surplus: a task type written by the job system once told the agent
    to `drain_instance ... reason budget`, and a producer went with 340 tasks waiting. A budget cut lifts it only
    while the fleet, less the producers already removed in this run, still commits more than the budget: a fleet
    a little over it is not a licence to drain every producer."""
    reason = action.reason
    if reason in NEED_FEWER_REASONS:
        return True
    if action.requested_by == "operator" or reason is RemovalReason.BENCH_FAILED:
        return False
    if reason is RemovalReason.BUDGET:
        return ledger.committed_after_removals() <= config.budget_usd_per_h
    return True


def backlog_floor(ledger: FleetLedger, config: GuardrailConfig) -> int:
    """Producers the backlog needs to drain within the horizon: none are removed below it, whoever asks."""
    if config.backlog_drain_horizon_h <= 0:
        return 0
    return math.ceil(ledger.backlog_worker_hours / config.backlog_drain_horizon_h - 1e-9)


def _verb(action: StopInstance | DestroyInstance | DrainInstance) -> str:
    if isinstance(action, DrainInstance):
        return "drain"
    return "stop" if isinstance(action, StopInstance) else "destroy"
