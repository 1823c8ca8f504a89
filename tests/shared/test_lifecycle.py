"""The one transition table, and the coarser records that move by it: vast's view (the provisioner's) and how
fleet reads what vast shows."""

from __future__ import annotations

import itertools

from shared.contract import InstanceState
from shared.lifecycle import (
    ORDER,
    RESUME_EDGES,
    TRANSITIONS,
    VAST_ONLY_EDGES,
    VAST_TRANSITIONS,
    VAST_VIEW,
    advance,
    allowed,
    coarsened,
    refined,
)

S = InstanceState
# what the provisioner can record: vast's view of every state
VAST_STATES = frozenset(state for shown in VAST_VIEW.values() for state in shown)


def test_every_state_has_a_row_and_every_edge_climbs_but_the_resume_loop() -> None:
    assert set(TRANSITIONS) == set(InstanceState)
    for from_state, targets in TRANSITIONS.items():
        for to_state in targets:
            climbs = ORDER[to_state] > ORDER[from_state]
            assert climbs or (from_state, to_state) in RESUME_EDGES, (from_state, to_state)
    # every edge back down leaves resuming: nothing else returns, and failed or gone never come back
    assert {from_state for from_state, _ in RESUME_EDGES} == {S.RESUMING}
    assert all(allowed(a, b) for a, b in RESUME_EDGES)
    assert TRANSITIONS[S.GONE] == frozenset()
    assert TRANSITIONS[S.FAILED] == frozenset({S.GONE})


def test_the_parking_loop_is_allowed_step_by_step() -> None:
    path = [S.PRODUCING, S.PARKED, S.RESUMING, S.PRODUCING, S.DRAINING, S.PARKED, S.RESUMING, S.FAILED, S.GONE]
    for a, b in itertools.pairwise(path):
        assert allowed(a, b), (a, b)
    assert not allowed(S.PARKED, S.PRODUCING)  # back to work only through resuming
    assert not allowed(S.FAILED, S.PARKED)


def test_the_happy_path_is_allowed_step_by_step() -> None:
    path = [S.REQUESTED, S.LOADING, S.RUNNING, S.REGISTERED, S.BENCHMARKED, S.PRODUCING, S.DRAINING, S.GONE]
    for a, b in itertools.pairwise(path):
        assert allowed(a, b)
    assert not allowed(S.PRODUCING, S.LOADING)
    assert not allowed(S.FAILED, S.PRODUCING)


def test_a_coarser_view_moves_where_an_edge_joins_the_states_it_stands_for() -> None:
    billed = {state: frozenset({"gone" if state is S.GONE else "billed"}) for state in S}
    assert coarsened(billed) == {"billed": frozenset({"gone"}), "gone": frozenset()}
    assert coarsened({state: frozenset({state}) for state in S}) == TRANSITIONS  # the identity view is the table


def test_vast_view_takes_the_moves_vast_shows_and_nothing_that_goes_back() -> None:
    assert set(VAST_TRANSITIONS) == VAST_STATES
    assert VAST_STATES.isdisjoint({S.REGISTERED, S.BENCHMARKED, S.PRODUCING})  # only fleet hears the workers
    assert VAST_TRANSITIONS[S.GONE] == frozenset()
    assert VAST_TRANSITIONS[S.FAILED] == frozenset({S.GONE})
    assert VAST_TRANSITIONS[S.PARKED] == frozenset({S.RESUMING, S.RUNNING, S.FAILED, S.GONE})  # an outbid bid won
    assert S.RUNNING in VAST_TRANSITIONS[S.RESUMING]  # running again, as far as vast can tell
    assert S.DRAINING in VAST_TRANSITIONS[S.LOADING]  # our stop before it ran (VAST_ONLY_EDGES)
    for from_state, to_state in [(S.RUNNING, S.LOADING), (S.LOADING, S.REQUESTED), (S.DRAINING, S.RUNNING),
                                 (S.RUNNING, S.RESUMING), (S.PARKED, S.DRAINING)]:  # fmt: skip
        assert to_state not in VAST_TRANSITIONS[from_state], (from_state, to_state)
    for from_state, targets in VAST_TRANSITIONS.items():
        for to_state in targets:
            # back down only around the resume loop: vast shows a parked or resuming machine running again
            climbs = ORDER[to_state] > ORDER[from_state]
            seen_running_again = to_state is S.RUNNING and from_state in (S.PARKED, S.RESUMING)
            assert climbs or (from_state, to_state) in RESUME_EDGES or seen_running_again, (from_state, to_state)


def test_advance_takes_an_allowed_move_and_keeps_the_state_otherwise() -> None:
    assert advance(None, S.RUNNING) is S.RUNNING  # a first sighting (adoption) is any state
    assert advance(S.LOADING, S.RUNNING) is S.RUNNING
    assert advance(S.PARKED, S.RUNNING) is S.RUNNING
    assert advance(S.GONE, S.RUNNING) is S.GONE  # a destroyed machine vast still lists
    assert advance(S.FAILED, S.RUNNING) is S.FAILED  # an offline host back for a moment is not revived
    assert advance(S.RUNNING, S.LOADING) is S.RUNNING  # never backwards
    assert advance(S.DRAINING, S.RUNNING) is S.DRAINING  # our stop not applied yet on vast's side
    assert advance(S.RESUMING, S.RESUMING) is S.RESUMING


def test_fleet_reads_vast_running_as_what_it_knows_and_a_parked_machine_running_as_resuming() -> None:
    for state in (S.REGISTERED, S.BENCHMARKED, S.PRODUCING, S.DRAINING, S.RESUMING):
        assert refined(state, S.RUNNING) is state  # vast says running; fleet knows more
    assert refined(S.PARKED, S.RUNNING) is S.RESUMING
    assert refined(S.LOADING, S.RUNNING) is S.RUNNING
    assert refined(S.FAILED, S.RUNNING) is S.RUNNING  # for the table to refuse
    assert refined(S.PRODUCING, S.PARKED) is S.PARKED


def test_fleet_applies_every_move_the_provisioner_can_report_but_a_stop_before_it_ran() -> None:
    """Whatever fleet knows of an instance, a move of vast's view of it is one fleet takes (or already knows), so
    the two records never disagree, except the moves only vast's view makes (fleet then waits for it as loading)."""
    for state in S:
        for shown in VAST_VIEW[state]:
            for observed in VAST_TRANSITIONS[shown]:
                target = refined(state, observed)
                taken = target is state or allowed(state, target)
                assert taken or (shown, observed) in VAST_ONLY_EDGES, (state, shown, observed)
