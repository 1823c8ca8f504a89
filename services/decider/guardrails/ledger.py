"""The guardrails' view of the fleet: the snapshot, the demand signal and the commands already sent, folded into a
`FleetLedger` that each allowed action updates within a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property

from shared.contract import (
    DemandSignal,
    DemandState,
    FailureReason,
    FleetSnapshot,
    InstanceLine,
    InstanceState,
    ParkReason,
)

S = InstanceState

# the window max_launches_per_h counts launches over
RATE_WINDOW_S = 3600.0
# a launch the snapshot does not show after this long is taken as refused or failed by the provisioner
LAUNCH_PENDING_S = 900.0
# fleet stamps created_at when it first sees the instance; allow that much clock difference with the send
CREATED_AT_SKEW_S = 5.0
# A stop or destroy sent is in flight until the snapshot shows the machine move on, for at most this long: a
# removal re-ordered every run while the first waits in the command queue flooded it (one demo on a busy
# machine ordered one destroy 66 times; the queue held 677 duplicates and real destroys waited hours behind
# them, billing). After this long without a move the first is taken as lost and may be ordered again.
REMOVAL_IN_FLIGHT_S = 900.0


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
    # the snapshot's lines, as read: what a removal frees is looked up here, only when a rule asks
    # (`committed_after_removals`), rather than tabled for every producer at every run
    lines: Sequence[InstanceLine] = ()
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

    # the producers among `states`, counted in `ledger_from`'s one pass (None: counted here when first read)
    producing_in_states: int | None = None

    @cached_property  # read by every rule of every action; a ledger changes only by `replace`, a new object
    def producing(self) -> int:
        """Producers not removed in this run. Each allowed removal makes a new ledger: counting the few removed
        rather than every state keeps a run of many removals on a 1000-machine fleet linear."""
        if self.producing_in_states is None:
            return sum(1 for iid, state in self.states.items() if state is S.PRODUCING and iid not in self.removed)
        return self.producing_in_states - sum(1 for iid in self.removed if self.states.get(iid) is S.PRODUCING)

    def committed_after_removals(self) -> float:
        """What the fleet commits once the producers removed in this run are gone (a removal of anything else frees
        nothing the budget rule reads here)."""
        if not self.removed:
            return self.committed_usd_per_h
        freed = sum(
            line.committed_usd_per_h
            for line in self.lines
            if line.instance_id in self.removed and line.state is S.PRODUCING
        )
        return self.committed_usd_per_h - freed

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
    lines = snapshot.instances if snapshot else []
    states: dict[int, InstanceState] = {}
    bench_failed: set[int] = set()
    prices: dict[int, tuple[float, float]] = {}
    outbid: set[int] = set()
    placements: dict[int, tuple[str | None, int | None]] = {}
    for line in lines:  # one pass: a 1000-instance snapshot is read at every run, most of it producing
        instance_id, state = line.instance_id, line.state
        states[instance_id] = state
        if line.bench_verdict == "fail" or line.failure_reason is FailureReason.BENCH_FAILED:
            bench_failed.add(instance_id)
        if line.park_reason is ParkReason.OUTBID:
            outbid.add(instance_id)
        if state is S.PARKED or state is S.RESUMING:
            prices[instance_id] = (line.price_usd_per_h, line.committed_usd_per_h)
            if state is S.PARKED:
                placements[instance_id] = (line.gpu_model, line.host_id)
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
        bench_failed=frozenset(bench_failed),
        prices=prices,
        outbid=frozenset(outbid),
        placements=placements,
        lines=lines,
        removals_in_flight=removals_in_flight(removals, snapshot, now),
        producing_in_states=sum(1 for state in states.values() if state is S.PRODUCING),
    )
