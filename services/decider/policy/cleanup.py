"""Cleanup: failed machines destroyed, drained ones given back or parked, parked and outbid ones given up on
once waiting for them no longer pays."""

from __future__ import annotations

from datetime import datetime

from services.decider.policy.base import RemovalPlan
from services.decider.policy.config import PolicyConfig
from services.decider.policy.fleet_view import FleetView, silent_for_s
from services.decider.policy.parking import ParkHistory, park_limit_s, parking_pays
from shared.contract import FailureReason, RemovalReason

FAILURE_TO_REMOVAL = {
    FailureReason.STUCK_LOADING: RemovalReason.STUCK_LOADING,
    FailureReason.NEVER_REGISTERED: RemovalReason.NEVER_REGISTERED,
    FailureReason.BENCH_FAILED: RemovalReason.BENCH_FAILED,
    FailureReason.DEAD: RemovalReason.DEAD,
    FailureReason.VAST_ERROR: RemovalReason.FAILED,
    FailureReason.LOST: RemovalReason.FAILED,
}


def cleanup(
    fleet: FleetView,
    now: datetime,
    config: PolicyConfig,
    stalled_state: bool,
    park_history: ParkHistory | None = None,
) -> list[RemovalPlan]:
    """Every removal that does not depend on the demand's size. Parked machines given up on leave `fleet.parked`
    (the growth planner must not count them). `park_history`: how parks ended lately (parking.py)."""
    removals = failed_and_drained(fleet, now, config, stalled_state, park_history)
    # parked too long: its GPU is likely someone else's by now, and the disk is billed for nothing; or parked
    # longer than its break-even or than the history's gaps; or parking does not pay at all any more
    expired = [
        line
        for line in fleet.parked
        if (now - line.state_since).total_seconds() >= park_limit_s(line, park_history, config)
    ]
    removals += [RemovalPlan("destroy", line.instance_id, RemovalReason.IDLE) for line in expired]
    expired_ids = {line.instance_id for line in expired}
    fleet.parked = [line for line in fleet.parked if line.instance_id not in expired_ids]
    removals += [RemovalPlan("destroy", line.instance_id, RemovalReason.OUTBID) for line in fleet.outbid
                 if (now - line.state_since).total_seconds() >= config.outbid_give_up_s]  # fmt: skip
    return removals


def failed_and_drained(
    fleet: FleetView,
    now: datetime,
    config: PolicyConfig,
    stalled_state: bool,
    park_history: ParkHistory | None = None,
) -> list[RemovalPlan]:
    removals = [
        RemovalPlan("destroy", line.instance_id, FAILURE_TO_REMOVAL.get(line.failure_reason, RemovalReason.FAILED))
        if line.failure_reason
        else RemovalPlan("destroy", line.instance_id, RemovalReason.FAILED)
        for line in fleet.failed
    ]
    if stalled_state:
        return removals  # while workers are stalled nothing is given back, not even a drained machine
    for line in fleet.draining:
        draining_s = (now - line.state_since).total_seconds()
        finished = draining_s >= config.drain_grace_s and silent_for_s(line, now) >= config.drain_grace_s
        if finished or draining_s >= config.max_drain_s:
            # parked (vast's stop keeps its disk and image) when parking, else given back
            removals.append(
                RemovalPlan("stop", line.instance_id, RemovalReason.PARK)
                if config.park and parking_pays(line, park_history, config)
                else RemovalPlan("destroy", line.instance_id, RemovalReason.IDLE)
            )
    return removals
