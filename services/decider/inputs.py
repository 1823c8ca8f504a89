"""What a run reads: the latest DemandSignal and FleetSnapshot, through the contract models, with their freshness."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import nats.errors
import pydantic
from faststream.nats import NatsBroker
from nats.js.errors import NotFoundError

from services.decider.decision import freshness
from shared.contract import DataFreshness, DemandSignal, FleetSnapshot, FleetSnapshotRequest
from shared.streams import LATEST
from shared.subjects import Subjects

log = logging.getLogger("fleetpilot.decider")

M = TypeVar("M", DemandSignal, FleetSnapshot)


@dataclass(frozen=True)
class RunData:
    signal: DemandSignal | None
    snapshot: FleetSnapshot | None
    signal_freshness: DataFreshness
    snapshot_freshness: DataFreshness

    @property
    def stale(self) -> bool:
        return self.signal_freshness != "fresh" or self.snapshot_freshness != "fresh"


class InputReader:
    def __init__(
        self,
        broker: NatsBroker,
        subjects: Subjects,
        *,
        source: str,
        signal_max_age_s: float,
        snapshot_max_age_s: float,
        snapshot_request_timeout_s: float,
    ) -> None:
        self.broker = broker
        self.subjects = subjects
        self.source = source
        self.signal_max_age_s = signal_max_age_s
        self.snapshot_max_age_s = snapshot_max_age_s
        self.snapshot_request_timeout_s = snapshot_request_timeout_s

    async def read(self, now: datetime) -> RunData:
        signal = await self._latest(self.subjects.demand_signal, DemandSignal)
        snapshot = await self._ask_fleet(now) or await self._latest(
            self.subjects.fleet_snapshot_published, FleetSnapshot
        )
        return RunData(
            signal,
            snapshot,
            freshness(signal.occurred_at if signal else None, now, self.signal_max_age_s),
            freshness(snapshot.occurred_at if snapshot else None, now, self.snapshot_max_age_s),
        )

    async def _latest(self, subject: str, model: type[M]) -> M | None:
        """The last value kept in the LATEST stream; an invalid one counts as missing (and is logged)."""
        js = self.broker.config.connection_state.stream
        try:
            raw = await js.get_last_msg(LATEST.name(self.subjects), subject)
        except NotFoundError:
            return None
        try:
            return model.model_validate_json(raw.data or b"")
        except pydantic.ValidationError as error:
            log.error("invalid %s on %s, treated as missing: %s", model.__name__, subject, error)
            return None

    async def _ask_fleet(self, now: datetime) -> FleetSnapshot | None:
        """fleet's current view by request/reply; None when fleet does not answer (the published one stands in)."""
        request = FleetSnapshotRequest(occurred_at=now, source=self.source)
        try:
            reply = await self.broker.connection.request(
                self.subjects.fleet_snapshot,
                request.model_dump_json().encode(),
                timeout=self.snapshot_request_timeout_s,
            )
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            return None
        try:
            return FleetSnapshot.model_validate_json(reply.data)
        except pydantic.ValidationError as error:
            log.error("invalid FleetSnapshot reply from fleet, using the published one: %s", error)
            return None
