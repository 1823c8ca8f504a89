"""The fleet as the policy reads it: the snapshot's machines by what they can do for the demand."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from services.decider.policy.config import PolicyConfig
from services.decider.policy.forecast import ARRIVING_STATES
from shared.contract import FleetSnapshot, InstanceLine, InstanceState, ParkReason


@dataclass
class FleetView:
    producing: list[InstanceLine] = field(default_factory=list)
    arriving: list[InstanceLine] = field(default_factory=list)
    draining: list[InstanceLine] = field(default_factory=list)
    failed: list[InstanceLine] = field(default_factory=list)
    parked: list[InstanceLine] = field(default_factory=list)  # by our stop, ours to resume (not outbid ones)
    outbid: list[InstanceLine] = field(default_factory=list)  # interruptible, paused by a higher bid
    resuming: list[InstanceLine] = field(default_factory=list)


def split_fleet(snapshot: FleetSnapshot) -> FleetView:
    fleet = FleetView()
    for line in snapshot.instances:
        if line.state is InstanceState.PRODUCING:
            fleet.producing.append(line)
        elif line.state in ARRIVING_STATES:
            fleet.arriving.append(line)
        elif line.state is InstanceState.DRAINING:
            fleet.draining.append(line)
        elif line.state is InstanceState.FAILED:
            fleet.failed.append(line)
        elif line.state is InstanceState.PARKED and line.park_reason is ParkReason.STOPPED:
            fleet.parked.append(line)
        elif line.state is InstanceState.PARKED and line.park_reason is ParkReason.OUTBID:
            fleet.outbid.append(line)
        elif line.state is InstanceState.RESUMING:
            fleet.resuming.append(line)
    return fleet


def silent_for_s(line: InstanceLine, now: datetime) -> float:
    since = line.last_task_at or line.state_since
    return (now - since).total_seconds()


def stalled_producers(producing: list[InstanceLine], now: datetime, config: PolicyConfig) -> list[InstanceLine]:
    """Producers silent too long; when demand says workers stalled but none looks silent, all are suspect."""
    silent = [line for line in producing if silent_for_s(line, now) >= config.stalled_after_s]
    return silent or list(producing)
