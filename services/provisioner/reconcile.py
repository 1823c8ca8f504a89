"""What the provisioner knows about each instance, how vast's raw status maps onto the lifecycle, and the diff
between what it knows and what vast lists (reconciliation). Pure: snapshots and `now` in, decisions out.

Labels carry the deployment and the launch's idempotency key, `fleetpilot:<deployment>:<key>:<n>` for the n-th
instance of a launch, so an instance created just before a crash or a timeout is recognised and adopted instead
of launched twice, and a second FleetPilot on the same vast.ai account (staging beside prod) never adopts, counts
or removes this one's machines. A label from before deployment ids (`fleetpilot:<key>:<n>`) belongs to the
default deployment: an upgraded single deployment keeps its machines, a named one leaves them alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from services.provisioner.host_history import Incident, IncidentKind
from services.provisioner.vast_models import VastInstance
from shared.contract import FailureReason, InstanceState, ParkReason, RemovalReason, committed_usd_per_h
from shared.lifecycle import advance

LABEL_PREFIX = "fleetpilot"
DEFAULT_DEPLOYMENT_ID = "default"  # shared.settings.Settings.deployment_id's default


class LaunchLabel(NamedTuple):
    """A FleetPilot label, read back: which launch slot, of which deployment."""

    idempotency_key: str
    slot: int  # the n-th instance of its launch
    deployment_id: str = DEFAULT_DEPLOYMENT_ID


def launch_label(idempotency_key: str, index: int, deployment_id: str = DEFAULT_DEPLOYMENT_ID) -> str:
    return f"{LABEL_PREFIX}:{deployment_id}:{idempotency_key}:{index}"


def parse_label(label: str | None) -> LaunchLabel | None:
    """(idempotency key, index, deployment) from a FleetPilot label, of any deployment; a label from before
    deployment ids reads as the default deployment's. None for anything else (other users' instances)."""
    if not label:
        return None
    parts = label.split(":")
    if parts[0] != LABEL_PREFIX or len(parts) not in (3, 4) or not all(parts) or not parts[-1].isdigit():
        return None
    if len(parts) == 3:
        return LaunchLabel(parts[1], int(parts[2]))
    return LaunchLabel(parts[2], int(parts[3]), parts[1])


def owner_of(label: str | None, deployment_id: str) -> str | None:
    """Whose instance a label says this is: None for this deployment's, the other deployment's id for another
    FleetPilot's, "" for no FleetPilot's at all."""
    parsed = parse_label(label)
    if parsed is None:
        return ""
    return None if parsed.deployment_id == deployment_id else parsed.deployment_id


class KnownInstance(BaseModel):
    """One instance as the provisioner knows it; persisted in Redis so a restart forgets nothing."""

    model_config = ConfigDict(extra="forbid")

    instance_id: int
    label: str | None = None
    idempotency_key: str | None = None
    offer_id: int | None = None
    gpu_model: str | None = None
    num_gpus: int = 1
    price_usd_per_h: float = Field(ge=0)
    storage_usd_per_h: float | None = Field(default=None, ge=0)
    is_bid: bool | None = None
    host_id: int | None = None
    machine_id: int | None = None
    state: InstanceState = InstanceState.REQUESTED
    failure_reason: FailureReason | None = None
    park_reason: ParkReason | None = None
    # our latest stop's reason, until a resume: `park` keeps the instance to start it again, any other winds it down
    stop_reason: RemovalReason | None = None
    vast_actual_status: str | None = None
    vast_intended_status: str | None = None
    vast_status_msg: str | None = None
    created_at: datetime
    state_since: datetime
    adopted: bool = False
    missing_lists: int = 0  # consecutive successful lists that did not show it
    # gone: what removed it (our destroy, with its reason and key, or vast no longer listing it)
    gone_because: str | None = None
    removal_reason: RemovalReason | None = None  # gone by our own destroy, for this reason
    # gone by our destroy, yet still listed: lists since (vast deletes asynchronously; past a few, destroy again)
    listed_after_gone: int = 0

    @property
    def committed_usd_per_h(self) -> float:
        return committed_usd_per_h(self.state, self.park_reason, self.price_usd_per_h, self.storage_usd_per_h)

    def moved(
        self, observed: InstanceState, now: datetime, update: Mapping[str, Any] = MappingProxyType({})
    ) -> KnownInstance:
        """This instance in `observed`, with what comes with the move (`update`: its failure or park reason, why it
        went), if vast's view of the lifecycle allows it (shared.lifecycle.advance); a move it refuses changes
        nothing: `.state` is not `observed`, for the caller to count. Every state the provisioner writes goes so."""
        state = advance(self.state, observed)
        if state is not observed:
            return self
        return self.model_copy(
            update={**update, "state": state, "state_since": now if state is not self.state else self.state_since}
        )


def observed_state(
    actual_status: str | None, intended_status: str | None, status_msg: str | None, previous: InstanceState | None
) -> tuple[InstanceState, FailureReason | None]:
    """vast's raw status → the lifecycle state the provisioner reports (fleet judges stuck/dead from time)."""
    actual = (actual_status or "").strip().lower()
    message = (status_msg or "").lower()
    if actual == "exited":
        return InstanceState.FAILED, FailureReason.VAST_ERROR
    if actual == "offline":
        return InstanceState.FAILED, FailureReason.DEAD
    if actual != "running" and "error" in message:
        # vast-cli's own wait loop gives up on an instance whose status_msg says Error (image pull, docker)
        return InstanceState.FAILED, FailureReason.VAST_ERROR
    if actual == "running":
        return InstanceState.RUNNING, None
    if actual == "loading":
        return InstanceState.LOADING, None
    if actual in ("stopped", "frozen") or (intended_status or "").lower() == "stopped":
        # not computing, still billed for storage: winding down until someone destroys it
        return InstanceState.DRAINING, None
    if actual in ("", "created", "null"):
        return InstanceState.REQUESTED, None
    # unknown (no heartbeat), rebooting, anything new: one poll is no verdict, keep what was known
    return (previous or InstanceState.REQUESTED), None


WAKING = frozenset({InstanceState.PARKED, InstanceState.RESUMING})


def lifecycle_of(
    row: VastInstance, current: KnownInstance | None
) -> tuple[InstanceState, FailureReason | None, ParkReason | None]:
    """vast's row → state, failure and park reason, knowing what we asked of the instance.

    vast shows our stop and an outbid pause alike (`stopped` in every status field, dstack reads outbid so): what
    tells them apart is whether we sent a stop, and why. A start waiting for its GPU ("Scheduling") is `stopped`
    but meant to run."""
    previous = current.state if current is not None else None
    state, reason = observed_state(row.actual_status, row.intended_status, row.status_msg, previous)
    actual = (row.actual_status or "").strip().lower()
    stop_reason = current.stop_reason if current is not None else None
    if state is InstanceState.DRAINING:
        meant_to_run = (row.intended_status or "").lower() == "running"
        bid = row.is_bid if row.is_bid is not None else (current is not None and current.is_bid)
        if previous in WAKING and (meant_to_run or (previous is InstanceState.RESUMING and not bid)):
            return InstanceState.RESUMING, None, None  # our start, waiting for its GPU or not applied yet
        if stop_reason is RemovalReason.PARK:
            return InstanceState.PARKED, None, ParkReason.STOPPED
        if previous is InstanceState.PARKED and current is not None and current.park_reason is not None:
            return InstanceState.PARKED, None, current.park_reason
        if stop_reason is None and bid:
            return InstanceState.PARKED, None, ParkReason.OUTBID  # paused by a higher bid: vast resumes it
        return state, reason, None
    if previous in WAKING and actual == "loading":
        return InstanceState.RESUMING, None, None  # started again and pulling what the stop interrupted
    return state, reason, None


def vast_status_label(actual_status: str | None) -> str:
    """For the instances-by-status gauge."""
    actual = (actual_status or "").strip().lower()
    if not actual:
        return "provisioning"
    if actual in ("created", "loading", "running", "stopped", "exited", "offline", "unknown"):
        return actual
    return "other"


def incident_for(instance: KnownInstance, at: datetime) -> Incident | None:
    """A failure the host history should remember."""
    if instance.state is not InstanceState.FAILED:
        return None
    kind = IncidentKind.OFFLINE if instance.failure_reason is FailureReason.DEAD else IncidentKind.VAST_ERROR
    return Incident(
        at=at, kind=kind, instance_id=instance.instance_id, host_id=instance.host_id, machine_id=instance.machine_id
    )


def from_vast(row: VastInstance, now: datetime, *, adopted: bool, unknown_price_usd_per_h: float) -> KnownInstance:
    """`unknown_price_usd_per_h` stands in when vast sends no price (null `dph_total` and `dph_base`): an
    unknown price is never zero in the budget, so the caller passes the most it would pay."""
    parsed = parse_label(row.label)
    price = row.price_usd_per_h
    state, reason, park_reason = lifecycle_of(row, None)
    created_at = datetime.fromtimestamp(row.start_date, tz=now.tzinfo) if row.start_date else now
    return KnownInstance(
        instance_id=row.id,
        label=row.label,
        idempotency_key=parsed.idempotency_key if parsed else None,
        gpu_model=row.gpu_name,
        num_gpus=row.num_gpus or 1,
        price_usd_per_h=price if price is not None else unknown_price_usd_per_h,
        host_id=row.host_id,
        machine_id=row.machine_id,
        storage_usd_per_h=row.storage_usd_per_h,
        is_bid=row.is_bid,
        state=state,
        failure_reason=reason,
        park_reason=park_reason,
        vast_actual_status=row.actual_status,
        vast_intended_status=row.intended_status,
        vast_status_msg=row.status_msg,
        created_at=created_at,
        state_since=now,
        adopted=adopted,
    )


@dataclass
class Reconciliation:
    """The decisions of one reconciliation. `known` is the new view; the lists say what to publish and report."""

    known: dict[int, KnownInstance]
    adopted: list[KnownInstance] = field(default_factory=list)
    changed: list[KnownInstance] = field(default_factory=list)
    gone: list[KnownInstance] = field(default_factory=list)
    # not ours: no FleetPilot label, or another deployment's (`foreign_owners` maps those ids to its deployment)
    foreign: list[VastInstance] = field(default_factory=list)
    foreign_owners: dict[int, str] = field(default_factory=dict)
    incidents: list[Incident] = field(default_factory=list)
    # (instance, its state, what vast's list showed) where the lifecycle refused the move: once per change vast shows
    refused: list[tuple[int, InstanceState, InstanceState]] = field(default_factory=list)
    # (instance, why) for rows that were read but made no sense as an instance: kept as known, never adopted
    unreadable: list[tuple[int, str]] = field(default_factory=list)

    @property
    def to_publish(self) -> list[KnownInstance]:
        return [*self.adopted, *self.changed, *self.gone]


def reconcile(
    known: dict[int, KnownInstance],
    listed: Iterable[VastInstance],
    now: datetime,
    *,
    gone_after_missing_lists: int,
    unknown_price_usd_per_h: float,
    unreadable_ids: frozenset[int] = frozenset(),
    deployment_id: str = DEFAULT_DEPLOYMENT_ID,
) -> Reconciliation:
    """Compare a successful instance list with what is known. Never call this with a failed list.

    `unreadable_ids` were listed but their rows could not be read: they exist, so what is known of them is
    kept as it was (neither updated nor counted missing). Only `deployment_id`'s labels are adopted."""
    result = Reconciliation(known={})
    seen: set[int] = set(unreadable_ids)
    for row in listed:
        seen.add(row.id)
        try:
            _reconcile_row(result, known.get(row.id), row, now, unknown_price_usd_per_h, deployment_id)
        except (ValueError, OverflowError) as error:
            # one row that makes no sense (a stranger's answer) is left as it was known: the rest of the list
            # still reconciles (an adopted row's odd field once failed the whole list, every round)
            result.unreadable.append((row.id, str(error).splitlines()[0][:200]))
    for instance_id, current in known.items():
        if instance_id in seen:
            if instance_id not in result.known:  # listed, but its row was unreadable: kept as it was
                result.known[instance_id] = current
            continue
        if current.state is InstanceState.GONE:
            result.known[instance_id] = current
            continue
        missed = _missed_once_more(current, now, gone_after_missing_lists)
        result.known[instance_id] = missed
        if missed.state is InstanceState.GONE:
            result.gone.append(missed)
    return result


def _reconcile_row(
    result: Reconciliation,
    current: KnownInstance | None,
    row: VastInstance,
    now: datetime,
    unknown_price_usd_per_h: float,
    deployment_id: str,
) -> None:
    """One listed row into `result`: a gone instance stays gone, a stranger's is reported, one of ours unknown so
    far is adopted, a known one takes what vast lists now. Everything is worked out before anything is written, so
    a row that raises leaves `result` as it was."""
    if current is not None and current.state is InstanceState.GONE:
        # gone is terminal (shared/lifecycle.py): a destroyed instance vast still lists (its delete is
        # asynchronous) is never revived into a state nobody will act on; the caller destroys it again after a
        # few lists
        result.known[row.id] = current.model_copy(update={"listed_after_gone": current.listed_after_gone + 1})
        return
    if current is None:
        owner = owner_of(row.label, deployment_id)
        if owner is not None:
            result.foreign.append(row)  # someone else's, or another deployment's: report, never touch
            if owner:
                result.foreign_owners[row.id] = owner
            return
        adopted = from_vast(row, now, adopted=True, unknown_price_usd_per_h=unknown_price_usd_per_h)
        incident = incident_for(adopted, now)
        result.known[row.id] = adopted
        result.adopted.append(adopted)
        if incident is not None:
            result.incidents.append(incident)
        return
    updated, observed = _as_listed(current, row, now)
    changed = _observably_different(current, updated)
    incident = incident_for(updated, now) if changed and updated.state is not current.state else None
    result.known[row.id] = updated
    if changed:
        result.changed.append(updated)
        if updated.state is not observed:
            result.refused.append((row.id, current.state, observed))
        if incident is not None:
            result.incidents.append(incident)


def second_rents_of_a_slot(
    known: Mapping[int, KnownInstance], deployment_id: str
) -> list[tuple[KnownInstance, KnownInstance]]:
    """(second, first): live instances of this deployment whose launch slot another live instance already holds.
    A slot is one rent, so any second is an accident (a create that acted after its look-up missed it) billing for
    nothing. Kept per slot: the one our own launch recorded (not adopted), then the lowest id."""
    slots: dict[tuple[str, int], list[KnownInstance]] = {}
    for instance in known.values():
        parsed = parse_label(instance.label)
        if instance.state is InstanceState.GONE or parsed is None or parsed.deployment_id != deployment_id:
            continue
        slots.setdefault((parsed.idempotency_key, parsed.slot), []).append(instance)
    seconds: list[tuple[KnownInstance, KnownInstance]] = []
    for holders in slots.values():
        first, *others = sorted(holders, key=lambda i: (i.adopted, i.instance_id))
        seconds.extend((other, first) for other in others)
    return sorted(seconds, key=lambda pair: pair[0].instance_id)


def _as_listed(current: KnownInstance, row: VastInstance, now: datetime) -> tuple[KnownInstance, InstanceState]:
    """A known instance as vast lists it now, and the state vast's row showed: vast's price and host are the truth
    (a null field leaves what was known), its state moves as the lifecycle allows."""
    state, reason, park_reason = lifecycle_of(row, current)
    moved = current.moved(state, now, {"failure_reason": reason, "park_reason": park_reason})
    listed = moved.model_copy(
        update={
            "storage_usd_per_h": row.storage_usd_per_h
            if row.storage_usd_per_h is not None
            else current.storage_usd_per_h,
            "is_bid": row.is_bid if row.is_bid is not None else current.is_bid,
            "vast_actual_status": row.actual_status,
            "vast_intended_status": row.intended_status,
            "vast_status_msg": row.status_msg,
            "price_usd_per_h": row.price_usd_per_h if row.price_usd_per_h is not None else current.price_usd_per_h,
            "host_id": row.host_id if row.host_id is not None else current.host_id,
            "machine_id": row.machine_id if row.machine_id is not None else current.machine_id,
            "gpu_model": row.gpu_name or current.gpu_model,
            "missing_lists": 0,
        }
    )
    return listed, state


def _missed_once_more(current: KnownInstance, now: datetime, gone_after_missing_lists: int) -> KnownInstance:
    """A known instance missing from one more list: gone only after several (a single list can miss a row: pages
    shift while instances come and go)."""
    missing = current.missing_lists + 1
    if missing < gone_after_missing_lists:
        return current.model_copy(update={"missing_lists": missing})
    gone = current.moved(
        InstanceState.GONE, now, {"gone_because": f"vast no longer lists it ({missing} lists in a row)"}
    )
    return gone.model_copy(update={"missing_lists": missing})


def _observably_different(before: KnownInstance, after: KnownInstance) -> bool:
    return (
        before.state,
        before.park_reason,
        before.vast_actual_status,
        before.vast_status_msg,
        before.vast_intended_status,
    ) != (
        after.state,
        after.park_reason,
        after.vast_actual_status,
        after.vast_status_msg,
        after.vast_intended_status,
    )
