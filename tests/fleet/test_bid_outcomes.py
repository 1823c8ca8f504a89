"""fleet's book of how the market treated our bids: interruptible machine-hours and outbid pauses per GPU model,
over a trailing window, in every snapshot (what the decider sets its bids from)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from services.fleet.config import FleetSettings
from services.fleet.core import FleetCore
from services.fleet.saved import SavedMeta, meta_of, restored_core, take_changes
from shared.contract import FleetSnapshot, InstanceState, ParkReason
from shared.contract.fleet import BidOutcome
from tests.fleet.test_core import T0, observed

S = InstanceState
HOUR = timedelta(hours=1)


def report(core: FleetCore, state: InstanceState, at: datetime, instance_id: int, **kwargs: object) -> None:
    """The provisioner's report of one interruptible machine (vast's `is_bid`)."""
    if state is S.PARKED:
        kwargs.setdefault("park_reason", ParkReason.OUTBID)
        kwargs.setdefault("vast_actual_status", "stopped")
    kwargs.setdefault("interruptible", True)
    core.observe_instance(observed(state, at, instance_id, **kwargs), at)


def outcome(core: FleetCore, at: datetime, gpu_model: str = "RTX 4090") -> BidOutcome | None:
    return next((o for o in core.snapshot(at).bid_outcomes if o.gpu_model == gpu_model), None)


def test_a_bid_counts_its_hours_up_and_outbid_and_an_on_demand_machine_none() -> None:
    core = FleetCore()
    report(core, S.REQUESTED, T0, 1)
    report(core, S.RUNNING, T0 + HOUR, 1)
    report(core, S.PARKED, T0 + 3 * HOUR, 1)  # paused by a higher bid: still exposed, it resumes by itself
    report(core, S.RUNNING, T0 + 4 * HOUR, 1)
    report(core, S.REQUESTED, T0, 2, interruptible=False)
    report(core, S.RUNNING, T0 + HOUR, 2, interruptible=False)
    report(core, S.REQUESTED, T0, 3, gpu_model="RTX 3090")
    report(core, S.GONE, T0 + 2 * HOUR, 3, gpu_model="RTX 3090", vast_actual_status=None)
    at = T0 + 5.5 * HOUR
    assert outcome(core, at) == BidOutcome(
        gpu_model="RTX 4090", interruptible_machine_h=5.5, outbid_pauses=1, window_s=24 * 3600
    )
    assert outcome(core, at, "RTX 3090") == BidOutcome(
        gpu_model="RTX 3090", interruptible_machine_h=2.0, outbid_pauses=0, window_s=24 * 3600
    )
    line = next(line for line in core.snapshot(at).instances if line.instance_id == 1)
    assert line.interruptible and not next(i for i in core.snapshot(at).instances if i.instance_id == 2).interruptible


def test_a_pause_the_provisioner_repeats_every_poll_counts_once_and_each_new_pause_again() -> None:
    core = FleetCore()
    report(core, S.RUNNING, T0, 1)
    for minute in range(0, 30, 5):  # one pause, reported by every list while it lasts
        report(core, S.PARKED, T0 + HOUR + timedelta(minutes=minute), 1)
    assert outcome(core, T0 + 2 * HOUR) == BidOutcome(
        gpu_model="RTX 4090", interruptible_machine_h=2.0, outbid_pauses=1, window_s=24 * 3600
    )
    report(core, S.RUNNING, T0 + 2 * HOUR, 1)  # its bid wins again: resuming
    report(core, S.PARKED, T0 + 3 * HOUR, 1)
    assert outcome(core, T0 + 4 * HOUR) == BidOutcome(
        gpu_model="RTX 4090", interruptible_machine_h=4.0, outbid_pauses=2, window_s=24 * 3600
    )


def test_a_bid_we_stopped_or_that_failed_is_not_exposed() -> None:
    core = FleetCore()
    report(core, S.RUNNING, T0, 1)
    report(core, S.RUNNING, T0, 2)
    report(core, S.PARKED, T0 + HOUR, 1, park_reason=ParkReason.STOPPED)  # our own stop, to resume later
    report(core, S.FAILED, T0 + 2 * HOUR, 2, vast_actual_status="exited")
    found = outcome(core, T0 + 10 * HOUR)
    assert found is not None
    assert (found.interruptible_machine_h, found.outbid_pauses) == (3.0, 0)


def test_hours_and_pauses_older_than_the_window_fall_out_of_it() -> None:
    core = FleetCore(FleetSettings(bid_window_s=6 * 3600))
    report(core, S.RUNNING, T0, 1)
    report(core, S.PARKED, T0 + HOUR, 1)
    report(core, S.GONE, T0 + 2 * HOUR, 1, vast_actual_status=None)
    report(core, S.RUNNING, T0 + 5 * HOUR, 2)
    found = outcome(core, T0 + 7 * HOUR)
    assert found is not None and (found.interruptible_machine_h, found.outbid_pauses) == (3.0, 1)
    # the first bid's hours and pause are over six hours old: only the second bid's eight hours are left
    found = outcome(core, T0 + 13 * HOUR)
    assert found is not None and (found.interruptible_machine_h, found.outbid_pauses) == (6.0, 0)
    report(core, S.GONE, T0 + 13 * HOUR, 2, vast_actual_status=None)
    assert core.snapshot(T0 + 20 * HOUR).bid_outcomes == []


def test_a_bid_up_for_longer_than_the_window_counts_the_window_only() -> None:
    core = FleetCore(FleetSettings(bid_window_s=6 * 3600))
    report(core, S.RUNNING, T0, 1)
    found = outcome(core, T0 + 30 * HOUR)
    assert found is not None and found.interruptible_machine_h == 6.0
    report(core, S.PARKED, T0 + 30 * HOUR, 1)
    found = outcome(core, T0 + 31 * HOUR)
    assert found is not None and (found.interruptible_machine_h, found.outbid_pauses) == (6.0, 1)


def test_a_restart_keeps_the_book_and_counts_the_bids_up_while_fleet_was_down() -> None:
    core = FleetCore()
    report(core, S.RUNNING, T0, 1)
    report(core, S.PARKED, T0 + HOUR, 1)
    report(core, S.RUNNING, T0 + 2 * HOUR, 1)
    records, _ = take_changes(core)
    meta = SavedMeta.model_validate_json(meta_of(core).model_dump_json())
    restarted_at = T0 + 4 * HOUR
    back = restored_core(json.loads(json.dumps(records)), meta, restarted_at)
    found = outcome(back, restarted_at + HOUR)
    assert found is not None and (found.interruptible_machine_h, found.outbid_pauses) == (pytest.approx(5.0), 1)
    assert back.instances[1].interruptible
    assert FleetSnapshot.model_validate_json(back.snapshot(restarted_at).model_dump_json()).bid_outcomes
