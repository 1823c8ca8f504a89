"""Hard guardrails: every action from the policy or the agent passes here before it becomes a command.

Pure: a `FleetLedger` (what the guardrails know) and an action in, a `GuardrailVerdict` and the updated ledger
out. A launch that only partly fits is trimmed (allowed, with the rule that trimmed it); anything else that
breaks a rule is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property

from shared import gpu_models
from shared.contract import (
    Action,
    DemandSignal,
    DemandState,
    DestroyInstance,
    DrainInstance,
    FailureReason,
    FleetSnapshot,
    GuardrailVerdict,
    InstanceState,
    LaunchInstances,
    LaunchReason,
    ParkReason,
    RemovalReason,
    ResumeInstance,
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
RATE_WINDOW_S = 3600.0
# the demand states that justify the emergency price cap: nobody completing queued work, or demand that demand's
# own thresholds (sustain_s, max_backlog_drain_h) judged beyond the fleet; anything else is a normal launch
EMERGENCY_STATES = frozenset({DemandState.WORKERS_STALLED, DemandState.UNDER_PROVISIONED})
# reasons that claim the fleet has too many producers, which a backlog needing them contradicts; a budget cut and
# an operator's own order are not claims about demand (the last-producers floor still holds for them)
NEED_FEWER_REASONS = frozenset({RemovalReason.IDLE, RemovalReason.OVER_PROVISIONED, RemovalReason.PARK})
# the drain horizon of the removal floor: the policy's backlog drain target (PolicyConfig.backlog_drain_target_s)
BACKLOG_DRAIN_HORIZON_H = 1.0
# a launch the snapshot does not show after this long is taken as refused or failed by the provisioner
LAUNCH_PENDING_S = 900.0
# fleet stamps created_at when it first sees the instance; allow that much clock difference with the send
CREATED_AT_SKEW_S = 5.0
# A stop or destroy sent is in flight until the snapshot shows the machine move on, for at most this long: a
# removal re-ordered every run while the first waits in the command queue flooded it (one demo on a busy
# machine ordered one destroy 66 times; the queue held 677 duplicates and real destroys waited hours behind
# them, billing). After this long without a move the first is taken as lost and may be ordered again.
REMOVAL_IN_FLIGHT_S = 900.0


class GuardrailRule(StrEnum):
    STALE_DATA = "stale_data"
    BUDGET = "budget_usd_per_h"
    MAX_INSTANCES = "max_instances"
    MAX_LAUNCHES_PER_H = "max_launches_per_h"
    PRICE_CAP = "price_cap"
    LAST_PRODUCERS = "last_producers"
    BACKLOG_FLOOR = "backlog_floor"  # producers the backlog needs over the drain horizon are kept
    EMERGENCY_UNJUSTIFIED = "emergency_unjustified"  # downgraded to normal: demand is not stalled or under-provisioned
    WORKERS_STALLED = "workers_stalled"
    REASON_REQUIRED = "reason_required"
    REMOVAL_STATE = "removal_state"
    UNKNOWN_INSTANCE = "unknown_instance"
    ALREADY_REMOVED = "already_removed"
    LOCK_LOST = "lock_lost"  # applied by the runner: a stale lock holder must not act
    BENCH_NOT_FAILED = "bench_not_failed"  # bench_failed named for a machine whose benchmark did not fail
    NOT_PARKED = "not_parked"  # a resume for a machine that is not parked by us
    REMOVAL_IN_FLIGHT = "removal_in_flight"  # a stop or destroy of this machine was sent and not carried out yet
    DIRECTIVE = "directive"  # an operator's directive excludes it (a GPU model, a host, a launch too late to produce)


@dataclass(frozen=True)
class GuardrailConfig:
    budget_usd_per_h: float
    max_instances: int
    normal_max_price_usd_per_h: float
    emergency_max_price_usd_per_h: float
    max_launches_per_h: int = 20
    min_producers_while_queued: int = 1
    backlog_drain_horizon_h: float = BACKLOG_DRAIN_HORIZON_H
    # set only by an operator's directives (services/decider/directives.py `tightened`); the configuration has none
    excluded_gpu_models: frozenset[str] = frozenset()
    excluded_host_ids: frozenset[int] = frozenset()
    no_launch_after: datetime | None = None  # a machine launched from then on could not produce before a drain
    # the directive behind each limit it tightened, so a verdict names it: keyed by the rule's value
    # ("max_instances", "budget_usd_per_h", "directive" for no_launch_after) or `exclusion_key`
    directive_ids: Mapping[str, int] = field(default_factory=dict, hash=False)

    def directive_of(self, key: str) -> int | None:
        return self.directive_ids.get(key)

    def excludes_gpu_model(self, gpu_model: str) -> bool:
        return any(gpu_models.normalised(gpu_model) == gpu_models.normalised(m) for m in self.excluded_gpu_models)


def exclusion_key(*, gpu_model: str | None = None, host_id: int | None = None) -> str:
    """The `directive_ids` key of one excluded GPU model (spelling ignored, as everywhere) or host."""
    if gpu_model is not None:
        return f"gpu_model:{gpu_models.normalised(gpu_model)}"
    return f"host_id:{host_id}"


@dataclass(frozen=True)
class SentLaunch:
    """A launch command already published (kept in Redis for an hour: rate limit and pending capacity)."""

    idempotency_key: str
    sent_at: datetime
    count: int
    worst_price_usd_per_h: float  # per instance: the cap the provisioner may pay at most


@dataclass(frozen=True)
class SentRemoval:
    """A stop or destroy already published (kept in Redis for REMOVAL_IN_FLIGHT_S: never ordered twice)."""

    idempotency_key: str
    sent_at: datetime
    instance_id: int
    verb: str  # "stop" or "destroy"


def removals_in_flight(
    sent: Sequence[SentRemoval], snapshot: FleetSnapshot | None, now: datetime
) -> dict[int, SentRemoval]:
    """Per instance, its latest removal still in flight: sent within REMOVAL_IN_FLIGHT_S, and the machine still
    in the snapshot in the state it had then (a move since the send means the provisioner acted on it)."""
    if snapshot is None:
        return {}
    moved_at = {line.instance_id: line.state_since for line in snapshot.instances}
    flying: dict[int, SentRemoval] = {}
    for removal in sorted(sent, key=lambda r: r.sent_at):
        since = moved_at.get(removal.instance_id)
        if since is None or (now - removal.sent_at).total_seconds() >= REMOVAL_IN_FLIGHT_S:
            continue
        if since <= removal.sent_at + timedelta(seconds=CREATED_AT_SKEW_S):
            flying[removal.instance_id] = removal
    return flying


@dataclass(frozen=True)
class FleetLedger:
    """The guardrails' view of the fleet, updated as actions are allowed within a run."""

    states: Mapping[int, InstanceState]
    committed_usd_per_h: float  # current spend + launches not yet visible, at their worst price
    instance_count: int  # non-gone instances + launches not yet visible
    launches: tuple[SentLaunch, ...]  # sent within the last rate window
    demand_present: bool  # tasks queued or arriving
    workers_stalled: bool
    stale: bool
    removed: frozenset[int] = field(default_factory=frozenset)
    # per instance: (full $/h, $/h it commits now); a parked one commits its storage, a resume its full price
    prices: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    # parked machines an outbid pause parked rather than we: vast resumes them, a resume command cannot
    outbid: frozenset[int] = field(default_factory=frozenset)
    resumed: frozenset[int] = field(default_factory=frozenset)
    # instances whose benchmark really failed: a missing report (verdict `unknown`) is no reason to remove one
    bench_failed: frozenset[int] = field(default_factory=frozenset)
    # stops and destroys sent in earlier runs that the snapshot does not show carried out yet
    removals_in_flight: Mapping[int, SentRemoval] = field(default_factory=dict)
    demand_state: DemandState | None = None  # None: no signal, which justifies no emergency
    backlog_worker_hours: float = 0.0
    # per parked instance: (GPU model, host id), so a resume onto an excluded model or host is refused
    placements: Mapping[int, tuple[str | None, int | None]] = field(default_factory=dict)

    @cached_property  # read by every rule of every action; a ledger changes only by `replace`, a new object
    def producing(self) -> int:
        return sum(1 for iid, state in self.states.items() if state is S.PRODUCING and iid not in self.removed)

    def launched_within(self, now: datetime, window_s: float = RATE_WINDOW_S) -> int:
        since = now - timedelta(seconds=window_s)
        return sum(launch.count for launch in self.launches if launch.sent_at > since)


def unobserved_launches(
    sent: Sequence[SentLaunch], snapshot: FleetSnapshot, now: datetime, pending_s: float = LAUNCH_PENDING_S
) -> list[SentLaunch]:
    """Recent launches the snapshot does not show yet, oldest first (instances created since fill them first)."""
    recent = sorted((s for s in sent if (now - s.sent_at).total_seconds() < pending_s), key=lambda s: s.sent_at)
    if not recent:
        return []
    since = recent[0].sent_at - timedelta(seconds=CREATED_AT_SKEW_S)
    observed = sum(1 for line in snapshot.instances if line.created_at >= since)
    remaining: list[SentLaunch] = []
    for launch in recent:
        seen = min(observed, launch.count)
        observed -= seen
        if launch.count > seen:
            remaining.append(replace(launch, count=launch.count - seen))
    return remaining


def demand_present(signal: DemandSignal | None) -> bool:
    # unknown demand is treated as present: removals are never justified by a missing signal
    return signal is None or signal.pending_tasks > 0 or signal.sustained_arrival_rate_per_h > 0


def ledger_from(
    snapshot: FleetSnapshot | None,
    signal: DemandSignal | None,
    sent: Sequence[SentLaunch],
    now: datetime,
    *,
    stale: bool,
    removals: Sequence[SentRemoval] = (),
) -> FleetLedger:
    pending = unobserved_launches(sent, snapshot, now) if snapshot else list(sent)
    states = {line.instance_id: line.state for line in snapshot.instances} if snapshot else {}
    spend = snapshot.spend_usd_per_h if snapshot else 0.0
    return FleetLedger(
        states=states,
        committed_usd_per_h=spend + sum(p.count * p.worst_price_usd_per_h for p in pending),
        instance_count=len(states) + sum(p.count for p in pending),
        launches=tuple(s for s in sent if (now - s.sent_at).total_seconds() < RATE_WINDOW_S),
        demand_present=demand_present(signal),
        workers_stalled=signal is not None and signal.state is DemandState.WORKERS_STALLED,
        demand_state=signal.state if signal is not None else None,
        backlog_worker_hours=signal.backlog_worker_hours if signal is not None else 0.0,
        stale=stale or snapshot is None or signal is None,
        bench_failed=frozenset(
            line.instance_id
            for line in (snapshot.instances if snapshot else [])
            if line.bench_verdict == "fail" or line.failure_reason is FailureReason.BENCH_FAILED
        ),
        prices={
            line.instance_id: (line.price_usd_per_h, line.committed_usd_per_h)
            for line in (snapshot.instances if snapshot else [])
            if line.state in (S.PARKED, S.RESUMING)
        },
        outbid=frozenset(
            line.instance_id
            for line in (snapshot.instances if snapshot else [])
            if line.park_reason is ParkReason.OUTBID
        ),
        placements={
            line.instance_id: (line.gpu_model, line.host_id)
            for line in (snapshot.instances if snapshot else [])
            if line.state is S.PARKED
        },
        removals_in_flight=removals_in_flight(removals, snapshot, now),
    )


def _verdict(
    action: Action, allowed: bool, rule: GuardrailRule | None, explanation: str, directive_id: int | None = None
) -> GuardrailVerdict:
    return GuardrailVerdict(
        action=action,
        verdict="allowed" if allowed else "refused",
        rule=rule.value if rule else None,
        explanation=explanation[:500],
        directive_id=directive_id,
    )


def worst_price_usd_per_h(action: LaunchInstances, config: GuardrailConfig) -> float:
    cap = (
        config.emergency_max_price_usd_per_h
        if action.launch_priority == "emergency"
        else config.normal_max_price_usd_per_h
    )
    return action.max_price_usd_per_h or cap


def check(
    action: Action, ledger: FleetLedger, now: datetime, config: GuardrailConfig
) -> tuple[GuardrailVerdict, FleetLedger]:
    """The verdict on one action, and the ledger as it stands if the action is carried out."""
    if ledger.stale:
        return _verdict(
            action, False, GuardrailRule.STALE_DATA, "demand signal or fleet snapshot is stale or missing"
        ), ledger
    if isinstance(action, LaunchInstances):
        return _check_launch(action, ledger, now, config)
    if isinstance(action, ResumeInstance):
        return _check_resume(action, ledger, config)
    return _check_removal(action, ledger, config)


def _check_resume(
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
        return _verdict(action, False, *refusal), ledger
    if (excluded := _excluded_placement(iid, ledger, config)) is not None:
        directive_id, where = excluded
        text = f"cannot resume #{iid}: {where} is excluded by {_by(directive_id)}"
        return _verdict(action, False, GuardrailRule.DIRECTIVE, text, directive_id), ledger
    price, committed = ledger.prices.get(iid, (0.0, 0.0))
    after = ledger.committed_usd_per_h - committed + price
    figures = f"committed ${ledger.committed_usd_per_h:.2f} of ${config.budget_usd_per_h:.2f}/h"
    if after > config.budget_usd_per_h + 1e-9:
        text = f"resume #{iid} at ${price:.2f}/h refused by {GuardrailRule.BUDGET.value}: {figures}"
        return _verdict(action, False, GuardrailRule.BUDGET, text), ledger
    text = (
        f"resume #{iid} (parked, {action.reason.value}): its kept disk back at ${price:.2f}/h instead of "
        f"${committed:.2f}/h storage; {figures} before, ${after:.2f}/h after"
    )
    updated = replace(ledger, committed_usd_per_h=after, resumed=ledger.resumed | {iid})
    return _verdict(action, True, None, text), updated


def _excluded_placement(iid: int, ledger: FleetLedger, config: GuardrailConfig) -> tuple[int | None, str] | None:
    """The directive that excludes this parked machine's GPU model or host, and which of them, if one does."""
    gpu_model, host_id = ledger.placements.get(iid, (None, None))
    if gpu_model is not None and config.excludes_gpu_model(gpu_model):
        return config.directive_of(exclusion_key(gpu_model=gpu_model)), f"its GPU model {gpu_model}"
    if host_id is not None and host_id in config.excluded_host_ids:
        return config.directive_of(exclusion_key(host_id=host_id)), f"its host {host_id}"
    return None


def _by(directive_id: int | None) -> str:
    return f"directive #{directive_id}" if directive_id is not None else "a directive"


def _directive_launch_refusal(
    action: LaunchInstances, now: datetime, config: GuardrailConfig
) -> GuardrailVerdict | None:
    """A launch too late to produce before a drain, or naming only excluded GPU models, is refused."""
    if config.no_launch_after is not None and now >= config.no_launch_after:
        directive_id = config.directive_of(GuardrailRule.DIRECTIVE.value)
        text = (
            f"launch {action.count} refused by {_by(directive_id)}: a machine launched from "
            f"{config.no_launch_after:%H:%M} UTC could not produce before its drain"
        )
        return _verdict(action, False, GuardrailRule.DIRECTIVE, text, directive_id)
    excluded = [m for m in action.gpu_models if config.excludes_gpu_model(m)]
    if action.gpu_models and len(excluded) == len(action.gpu_models):
        directive_id = config.directive_of(exclusion_key(gpu_model=excluded[0]))
        text = f"launch {action.count} refused by {_by(directive_id)}: {', '.join(excluded)} excluded"
        return _verdict(action, False, GuardrailRule.DIRECTIVE, text, directive_id)
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


def _check_launch(
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
        return _verdict(action, False, GuardrailRule.PRICE_CAP, text), ledger
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
    by = binding.value + (f" ({_by(directive_id)})" if directive_id is not None else "")
    if allowed == 0:
        text = f"{downgrade}launch {action.count} refused by {by}: {figures}"
        return _verdict(action, False, binding, text, directive_id), ledger
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
    return _verdict(granted, True, rule, text, directive_id), updated


def backlog_floor(ledger: FleetLedger, config: GuardrailConfig) -> int:
    """Producers the backlog needs to drain within the horizon: none are removed below it, whoever asks."""
    if config.backlog_drain_horizon_h <= 0:
        return 0
    return math.ceil(ledger.backlog_worker_hours / config.backlog_drain_horizon_h - 1e-9)


def _verb(action: StopInstance | DestroyInstance | DrainInstance) -> str:
    if isinstance(action, DrainInstance):
        return "drain"
    return "stop" if isinstance(action, StopInstance) else "destroy"


def _check_removal(
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
        and action.reason in NEED_FEWER_REASONS
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
        return _verdict(action, False, *refusal), ledger
    assert state is not None
    if isinstance(action, StopInstance) and action.reason is RemovalReason.PARK:
        text = (
            f"park #{iid} ({state.value}): stopped with its disk kept to resume when demand returns, storage "
            f"billed only; {ledger.producing} producing before"
        )
    else:
        text = f"{verb} #{iid} ({state.value}, {action.reason.value}); {ledger.producing} producing before"
    return _verdict(action, True, None, text), replace(ledger, removed=ledger.removed | {iid})
