"""The world's machine states as a view of the one lifecycle (shared/lifecycle.py): the moves they may make."""

from __future__ import annotations

from collections.abc import Mapping

from shared.contract import InstanceState
from shared.lifecycle import coarsened
from sim.world.model import MachineState

S, M = InstanceState, MachineState

# what the world's machine state is while the lifecycle is in each state: its loading is everything before work
# (rent, pull, start, registration, benchmark), and a failure is its host going offline or its container exiting
MACHINE_VIEW: Mapping[InstanceState, frozenset[MachineState]] = {
    S.REQUESTED: frozenset({M.LOADING}),
    S.LOADING: frozenset({M.LOADING}),
    S.RUNNING: frozenset({M.LOADING}),
    S.REGISTERED: frozenset({M.LOADING}),
    S.BENCHMARKED: frozenset({M.LOADING}),
    S.PRODUCING: frozenset({M.PRODUCING}),
    S.DRAINING: frozenset({M.DRAINING}),
    S.PARKED: frozenset({M.PARKED}),
    S.RESUMING: frozenset({M.RESUMING}),
    S.FAILED: frozenset({M.OFFLINE, M.EXITED}),
    S.GONE: frozenset({M.GONE}),
}
MACHINE_TRANSITIONS = coarsened(MACHINE_VIEW)


class LifecycleBroken(AssertionError):
    """The engine moved a machine where the lifecycle has no edge: a simulator bug, never a policy's."""


def check_move(instance_id: int, was: MachineState, state: MachineState) -> None:
    if state is not was and state not in MACHINE_TRANSITIONS[was]:
        raise LifecycleBroken(f"machine {instance_id}: {was.value} -> {state.value} is no move of the lifecycle")
