"""fleet's saved state, validated by pydantic when it is read back: one record per instance, and the bookkeeping.

Versions (the store's marker, services/fleet/store.py):
- 1 and 2: positional JSON (a record's history entries and throughput window were lists whose meaning was their
  order, fields added later read with defaults; 2 only added the marker). Read through `*_from_positional`.
- 3: an instance record is `InstanceRecord` itself, every field named (pydantic validates the dataclass: a new
  field needs a default, and the version moves with a migration test when a field changes meaning); the
  bookkeeping is `SavedMeta`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

from services.fleet.config import FleetSettings
from services.fleet.core import FleetCore
from services.fleet.record import InstanceRecord

INSTANCE = TypeAdapter(InstanceRecord)
# rebuilt on restore, never saved: the bid book's exposure is re-booked from the records (services/fleet/core.py)
NOT_SAVED = {"bid_model"}


class SavedMeta(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    queue_pending: int | None
    queue_at_s: float | None
    queued_since_s: float | None
    last_producer_event_s: float | None
    producing_entered_s: float | None
    silence_alerted: bool
    # per GPU model: (bids exposed, since when, the window's slices [start s, machine-seconds, outbid pauses])
    bids: dict[str, tuple[int, float, list[list[float]]]] = {}
    # per way a park ended (resumed, taken, given_back): (when, hours parked before)
    parks: dict[str, list[tuple[float, float]]] = {}


def saved_instance(record: InstanceRecord) -> dict[str, Any]:
    saved: dict[str, Any] = INSTANCE.dump_python(record, mode="json", exclude=NOT_SAVED)
    return saved


def restored_instance(values: dict[str, Any]) -> InstanceRecord:
    return INSTANCE.validate_python(values)


def instance_from_positional(values: dict[str, Any]) -> dict[str, Any]:
    """A version 1 or 2 record with every field named, as version 3 saves it."""
    named = {key: value for key, value in values.items() if key not in ("window", "history")}
    named["window_start_s"], named["window_count"], named["previous_window_count"] = values["window"]
    named["history"] = [
        {"at_s": at_s, "from_state": from_state, "to_state": to_state, "detail": detail, "applied": applied}
        for at_s, from_state, to_state, detail, applied in values["history"]
    ]
    # absent in records saved before parking: a machine that produced then, produced first by then
    named.setdefault("first_producing_s", values["producing_since_s"])
    return named


def meta_from_positional(meta: dict[str, Any]) -> SavedMeta:
    named = {key: value for key, value in meta.items() if key != "version"}
    named.setdefault("bids", {})  # absent in state saved before bids were booked
    named.setdefault("parks", {})  # absent in state saved before parks were booked
    return SavedMeta.model_validate(named)


def take_changes(core: FleetCore) -> tuple[list[dict[str, Any]], list[int]]:
    """Records to save (JSON-able, every field named) and ids to delete since the last call."""
    saved = [saved_instance(core.instances[i]) for i in sorted(core.dirty) if i in core.instances]
    deleted = sorted(core.purged)
    core.dirty.clear()
    core.purged.clear()
    return saved, deleted


def meta_of(core: FleetCore) -> SavedMeta:
    return SavedMeta(
        queue_pending=core.queue_pending,
        queue_at_s=core.queue_at_s,
        queued_since_s=core.queued_since_s,
        last_producer_event_s=core.last_producer_event_s,
        producing_entered_s=core.producing_entered_s,
        silence_alerted=core.silence_alerted,
        bids=core.bids.to_dict(),
        parks=core.parks.to_dict(),
    )


def restored_core(
    records: list[dict[str, Any]], meta: SavedMeta | None, now: datetime, config: FleetSettings | None = None
) -> FleetCore:
    """Rebuilt after a restart: one record per instance id, deadlines re-armed, silence measured from now. A
    record that does not validate raises (pydantic's ValidationError): the service then starts empty."""
    core = FleetCore(config)
    for values in records:
        core.adopt(restored_instance(values))
    if meta is not None:
        core.bids.restore(meta.bids, now.timestamp())
        core.parks.restore(meta.parks)
        core.queue_pending = meta.queue_pending
        core.queue_at_s = meta.queue_at_s
        core.queued_since_s = meta.queued_since_s
        core.last_producer_event_s = meta.last_producer_event_s
        core.producing_entered_s = meta.producing_entered_s
        core.silence_alerted = meta.silence_alerted
    core.resume_after_restart(now.timestamp())
    return core
