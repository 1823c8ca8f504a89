"""What fleet adds to the lifecycle (its transition table is shared/lifecycle.py): how long each state may last,
what vast's status should be in each, and which transitions wake the decider how urgently."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from operator import attrgetter

from services.fleet.config import FleetSettings
from shared.contract import FailureReason, InstanceState, ParkReason, TriggerPriority, TriggerReason
from shared.lifecycle import resume_stage

S = InstanceState

# States the decider counts as capacity on its way (not yet producing).
ARRIVING = frozenset({S.REQUESTED, S.LOADING, S.RUNNING, S.REGISTERED, S.BENCHMARKED})

# vast's actual_status that each state implies; anything else is shown on the instance's line.
EXPECTED_VAST_STATUS: Mapping[InstanceState, frozenset[str | None]] = {
    S.REQUESTED: frozenset({None, "created"}),
    S.LOADING: frozenset({"created", "loading"}),
    S.RUNNING: frozenset({"running"}),
    S.REGISTERED: frozenset({"running"}),
    S.BENCHMARKED: frozenset({"running"}),
    S.PRODUCING: frozenset({"running"}),
    S.DRAINING: frozenset({"running"}),
    S.PARKED: frozenset({"stopped"}),
    S.RESUMING: frozenset({"loading", "running"}),  # "stopped" here means it waits for its GPU: shown
    S.FAILED: frozenset(),
    S.GONE: frozenset(),
}


class CountsFrom(StrEnum):
    """From when a time limit counts."""

    IN_STATE = "in_state"  # the state's start
    # its last sign of life (task, state start, the queue filling, fleet watching again), only while tasks wait: a
    # worker with nothing to do says nothing. With none waiting it is looked at again a full limit later...
    SILENT_WHILE_QUEUED = "silent_while_queued"
    # ...or within IDLE_RECHECK_S, for a machine still to prove itself (the clock starts when tasks wait)
    SILENT_WHILE_QUEUED_LOOK_SOON = "silent_while_queued_look_soon"


@dataclass(frozen=True)
class TimeLimit:
    """Past `limit_s` (a fleet setting) counted `counts_from`, an instance fails with `reason`; `detail` says why
    (fields: state, status, limit_h, limit_min, pending). No reason: a gone instance is forgotten."""

    limit_s: Callable[[FleetSettings], float]
    reason: FailureReason | None
    counts_from: CountsFrom
    detail: str = ""


_STUCK_LOADING = TimeLimit(attrgetter("stuck_loading_s"), FailureReason.STUCK_LOADING, CountsFrom.IN_STATE,
                           "{state} for {limit_h:g} h")  # fmt: skip
_SILENT_DEAD = TimeLimit(attrgetter("silent_dead_s"), FailureReason.DEAD, CountsFrom.SILENT_WHILE_QUEUED,
                         "no task event for {limit_min:g} min while {pending} tasks were queued")  # fmt: skip

# Every time limit, per state and (for a resume) vast's status: what "stuck" and "dead" mean. A state that is not
# here (parked included: a kept machine is never stuck nor dead) has none.
TIME_LIMITS: Mapping[tuple[InstanceState, str | None], TimeLimit] = {
    (S.REQUESTED, None): _STUCK_LOADING,
    (S.LOADING, None): _STUCK_LOADING,
    # Workers register with their first task, and the job system feeds its oldest workers first: a machine that
    # arrives while the others cover the load gets no task and so cannot register. Only time with tasks waiting
    # proves a worker broken (the world simulator saw 39 of 98 spike launches failed as idle newcomers before this).
    (S.RUNNING, None): TimeLimit(
        attrgetter("never_registered_s"),
        FailureReason.NEVER_REGISTERED,
        CountsFrom.SILENT_WHILE_QUEUED_LOOK_SOON,
        "running and no worker registered for {limit_min:g} min while tasks were queued",
    ),
    (S.BENCHMARKED, None): _SILENT_DEAD,
    (S.PRODUCING, None): _SILENT_DEAD,
    # a start pulling again is judged like loading
    (S.RESUMING, "loading"): TimeLimit(
        attrgetter("stuck_loading_s"),
        FailureReason.STUCK_LOADING,
        CountsFrom.IN_STATE,
        "resuming and loading for {limit_h:g} h",
    ),
    # a start waiting for its GPU (vast still says stopped): past the limit someone else holds it, and a new launch
    # is the faster way back
    (S.RESUMING, "stopped"): TimeLimit(
        attrgetter("resume_wait_s"),
        FailureReason.GPU_TAKEN,
        CountsFrom.IN_STATE,
        "resume waited {limit_min:g} min for its GPU (vast {status}): rented by someone else",
    ),
    # running again: judged like a silent worker that has to prove itself
    (S.RESUMING, "running"): TimeLimit(
        attrgetter("never_registered_s"),
        FailureReason.DEAD,
        CountsFrom.SILENT_WHILE_QUEUED_LOOK_SOON,
        "resumed and running, but no task event for {limit_min:g} min while tasks were queued",
    ),
    (S.GONE, None): TimeLimit(attrgetter("gone_retention_s"), None, CountsFrom.IN_STATE),
}


def time_limit(state: InstanceState, vast_status: str | None) -> TimeLimit | None:
    """The limit that applies now: a resume's by vast's status (any other than loading or running: still stopped)."""
    if state is not S.RESUMING:
        return TIME_LIMITS.get((state, None))
    return TIME_LIMITS[(S.RESUMING, resume_stage(vast_status))]


def first_limit_s(state: InstanceState, config: FleetSettings) -> float | None:
    """The shortest limit the state may meet (a lower bound of its deadline, refined when it comes due)."""
    limits = [limit.limit_s(config) for (s, _), limit in TIME_LIMITS.items() if s is state]
    return min(limits) if limits else None


def trigger_for(
    from_state: InstanceState | None,
    to_state: InstanceState,
    reason: FailureReason | None,
    park_reason: ParkReason | None = None,
    *,
    planned: bool = False,
) -> tuple[TriggerPriority, TriggerReason]:
    """P0 when capacity appears or disappears unplanned; P1 for the rest (the decider debounces those). `planned`:
    gone through our own destroy (a scale-down is no instance failure)."""
    if to_state == S.RUNNING:
        return "p0", TriggerReason.INSTANCE_RUNNING
    if to_state == S.FAILED:
        return "p0", TriggerReason.INSTANCE_DEAD if reason == FailureReason.DEAD else TriggerReason.INSTANCE_FAILED
    if to_state == S.GONE and not planned and from_state not in (None, S.DRAINING, S.FAILED, S.PARKED):
        return "p0", TriggerReason.INSTANCE_FAILED  # killed: gone without being drained first
    if to_state == S.PARKED and park_reason is ParkReason.OUTBID and from_state is not S.DRAINING:
        return "p0", TriggerReason.INSTANCE_FAILED  # capacity lost unplanned: a higher bid paused it
    return "p1", TriggerReason.INSTANCE_TRANSITION
