"""The instance lifecycle as one transition table, and how the coarser records of it move by the same table.

Each state maps to the states it may move to, with the real-world event behind every edge (after Ray
autoscaler v2's instance manager). fleet keeps the full lifecycle; the provisioner keeps what vast.ai shows of
it (VAST_VIEW) and the world simulator its own machine states: each moves only where an edge of this table
joins the states it stands for (`coarsened`). Anything else is refused, kept out of the record and counted.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import TypeVar

from shared.contract import InstanceState

S = InstanceState
Coarse = TypeVar("Coarse", bound=Hashable)

TRANSITIONS: Mapping[InstanceState, frozenset[InstanceState]] = {
    S.REQUESTED: frozenset(
        {
            S.PARKED,  # an interruptible create whose bid lost at once: vast keeps it paused until its bid wins
            S.LOADING,  # vast accepted the rent; the host is pulling the image
            S.RUNNING,  # the provisioner's first poll already finds the container running
            S.REGISTERED,  # a worker reported before the provisioner's poll saw it loading or running
            S.FAILED,  # vast refused or errored the create (vast_error), or it never loaded (stuck_loading)
            S.GONE,  # destroyed before it ever loaded
        }
    ),
    S.LOADING: frozenset(
        {
            S.RUNNING,  # the container started
            S.REGISTERED,  # a worker reported before the provisioner's poll saw it running
            S.PARKED,  # outbid while it pulled its image (the disk, and what it pulled, are kept)
            S.FAILED,  # loading for hours (stuck_loading) or an error in vast's status message (vast_error)
            S.GONE,  # destroyed while loading
        }
    ),
    S.RUNNING: frozenset(
        {
            S.REGISTERED,  # the job system's worker on it sent its first task event
            S.BENCHMARKED,  # the on-start benchmark reported before the worker's first task event
            S.DRAINING,  # the decider drained it before it registered
            S.PARKED,  # stopped to be resumed later, or its bid was outbid (vast paused it, disk kept)
            S.FAILED,  # running but no worker ever registered (never_registered), or it went offline (lost)
            S.GONE,  # stopped or destroyed
        }
    ),
    S.REGISTERED: frozenset(
        {
            S.BENCHMARKED,  # the benchmark passed (pass or degraded)
            S.PRODUCING,  # it completed a task before the benchmark verdict came back
            S.DRAINING,  # the decider drained it
            S.PARKED,  # stopped to be resumed later, or outbid
            S.FAILED,  # the benchmark failed (bench_failed), or vast lost it (lost)
            S.GONE,  # stopped or destroyed
        }
    ),
    S.BENCHMARKED: frozenset(
        {
            S.PRODUCING,  # it completed its first task
            S.DRAINING,  # the decider drained it
            S.PARKED,  # stopped to be resumed later, or outbid
            S.FAILED,  # silent while tasks were queued (dead), or lost
            S.GONE,  # stopped or destroyed
        }
    ),
    S.PRODUCING: frozenset(
        {
            S.DRAINING,  # the decider drained it: no longer counted as capacity
            S.PARKED,  # the provisioner stopped it to be resumed later, or its bid was outbid
            S.FAILED,  # silent while tasks were queued (dead), a late failing benchmark, or lost
            S.GONE,  # stopped or destroyed (killed, if nobody drained it first)
        }
    ),
    S.DRAINING: frozenset(
        {
            S.PARKED,  # the provisioner stopped it once drained, keeping its disk to resume it later
            S.FAILED,  # vast lost it while it drained (lost)
            S.GONE,  # the provisioner stopped or destroyed it once drained
        }
    ),
    S.PARKED: frozenset(
        {
            S.RESUMING,  # the provisioner started it again, or vast resumed an outbid bid (running again)
            S.FAILED,  # vast lost it while parked (lost, vast_error)
            S.GONE,  # destroyed: demand did not come back within the horizon
        }
    ),
    S.RESUMING: frozenset(
        {
            S.REGISTERED,  # parked before its benchmark: its worker's first task event, then the benchmark
            S.PRODUCING,  # a proven machine completed a task again (same machine: no new benchmark)
            S.DRAINING,  # the decider drained it before it produced again
            S.PARKED,  # stopped again, or outbid again before it produced
            S.FAILED,  # its start waited in "Scheduling" too long (gpu_taken), or silent, or lost
            S.GONE,  # destroyed while it waited
        }
    ),
    S.FAILED: frozenset(
        {
            S.GONE,  # destroyed (the decider's cleanup) or no longer listed by vast
        }
    ),
    S.GONE: frozenset(),  # terminal: a late observation cannot bring it back
}

# How far along its life an instance is: every edge of the table climbs it, except the one loop a kept disk
# allows (parked → resuming → producing or registered), so nothing else moves backwards.
ORDER: Mapping[InstanceState, int] = {
    S.REQUESTED: 0,
    S.LOADING: 1,
    S.RUNNING: 2,
    S.REGISTERED: 3,
    S.BENCHMARKED: 4,
    S.PRODUCING: 5,
    S.DRAINING: 6,
    S.PARKED: 7,
    S.RESUMING: 8,
    S.FAILED: 9,
    S.GONE: 10,
}
# the edges that go back down ORDER: a parked machine comes back to work without a new rent
RESUME_EDGES = frozenset(
    {(S.RESUMING, S.REGISTERED), (S.RESUMING, S.PRODUCING), (S.RESUMING, S.DRAINING), (S.RESUMING, S.PARKED)}
)


def allowed(from_state: InstanceState, to_state: InstanceState) -> bool:
    return to_state in TRANSITIONS[from_state]


def is_backwards(from_state: InstanceState, to_state: InstanceState) -> bool:
    return ORDER[to_state] < ORDER[from_state] and (from_state, to_state) not in RESUME_EDGES


def coarsened(view: Mapping[InstanceState, Collection[Coarse]]) -> Mapping[Coarse, frozenset[Coarse]]:
    """The table as a coarser record sees it: `view` names, for each state, the records' states that may stand
    for it; a record may move from one to another where an edge of TRANSITIONS joins states they stand for."""
    edges: dict[Coarse, set[Coarse]] = {coarse: set() for shown in view.values() for coarse in shown}
    for from_state, targets in TRANSITIONS.items():
        for to_state in targets:
            for before in view[from_state]:
                edges[before].update(after for after in view[to_state] if after != before)
    return {coarse: frozenset(after) for coarse, after in edges.items()}


# vast sees a machine run, not its worker nor the decider's drain: what a record kept from vast alone (the
# provisioner's) says of each state. The provisioner names parked and resuming from its own stop and start.
VAST_VIEW: Mapping[InstanceState, frozenset[InstanceState]] = {
    S.REQUESTED: frozenset({S.REQUESTED}),
    S.LOADING: frozenset({S.LOADING}),
    S.RUNNING: frozenset({S.RUNNING}),
    S.REGISTERED: frozenset({S.RUNNING}),  # its worker's task events go to fleet, not to vast
    S.BENCHMARKED: frozenset({S.RUNNING}),
    S.PRODUCING: frozenset({S.RUNNING}),
    S.DRAINING: frozenset({S.RUNNING, S.DRAINING}),  # a drained machine runs on until our stop (then: draining)
    S.PARKED: frozenset({S.PARKED}),
    S.RESUMING: frozenset({S.RESUMING, S.RUNNING}),  # running again before its worker proves it back
    S.FAILED: frozenset({S.FAILED}),
    S.GONE: frozenset({S.GONE}),
}
# The moves only vast's view makes: a stop that does not park, sent before the machine ran, shows it stopped for
# good (draining, to the provisioner). The full lifecycle has no such edge: fleet keeps it loading until it is stuck.
VAST_ONLY_EDGES = frozenset({(S.REQUESTED, S.DRAINING), (S.LOADING, S.DRAINING)})
VAST_TRANSITIONS: Mapping[InstanceState, frozenset[InstanceState]] = {
    state: targets | {to_state for from_state, to_state in VAST_ONLY_EDGES if from_state is state}
    for state, targets in coarsened(VAST_VIEW).items()
}


def advance(current: InstanceState | None, observed: InstanceState) -> InstanceState:
    """The state a record kept from vast's view takes when vast shows `observed`: a move VAST_TRANSITIONS allows,
    or a first sighting, is taken; any other keeps `current` (gone stays gone, failed is not revived by a later
    list, nothing moves backwards), for the caller to count."""
    if current is None or observed in VAST_TRANSITIONS[current]:
        return observed
    return current


def refined(current: InstanceState, observed: InstanceState) -> InstanceState:
    """What vast's view `observed` means for an instance the full lifecycle has in `current`: `current` itself where
    vast shows it so (vast says running; fleet knows more), the one next state vast shows so when the table has no
    edge to `observed` itself (a parked machine running again is resuming), else `observed` for the table to judge."""
    if observed in VAST_VIEW[current]:
        return current
    if observed not in TRANSITIONS[current]:
        shown_so = [state for state in TRANSITIONS[current] if observed in VAST_VIEW[state]]
        if len(shown_so) == 1:
            return shown_so[0]
    return observed


def resume_stage(vast_status: str | None) -> str:
    """Where a resume stands by vast's status: "loading" (pulling again), "running", or "stopped" (any other: vast
    has not started it, usually because its GPU is rented by someone else). Read by fleet's time limits and by the
    decider's plan alike."""
    status = (vast_status or "stopped").lower()
    return status if status in ("loading", "running") else "stopped"
