"""Reading the record an operator's question is answered from: the decision records (FP_AUDIT, newest first by
direct get, as the decider's NATS user may) and the instances' transitions (FP_INSTANCES, an ordered consumer from
a start time). Bounded: a question is asked in a run, and a run must not read 90 days of audit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any, Protocol

import nats.errors
import nats.js.errors
from faststream.nats import NatsBroker
from nats.js.api import ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from services.decider.agent.record import Record
from shared.contract import DecisionRecord, InstanceTransitioned
from shared.streams import AUDIT, INSTANCES
from shared.subjects import Subjects

log = logging.getLogger("fleetpilot.decider.agent")

# ~10 KB a record: 300 is ~3 MB and ~10 h of runs at 30 runs/h; an answer further back says where the read stopped
AUDIT_READ_MAX = 300
TRANSITIONS_READ_MAX = 5_000  # a busy day's transitions: ~40 machines × ~10 states, many times over
READ_IDLE_S = 1.0  # an ordered consumer that delivers nothing for this long has delivered everything
READ_TIMEOUT_S = 10.0  # a person is waiting for the reply: the whole read, both streams


class RecordReader(Protocol):
    async def read(self, since: datetime) -> Record: ...


class JetStreamRecordReader:
    def __init__(self, broker: NatsBroker, subjects: Subjects) -> None:
        self.broker = broker
        self.subjects = subjects

    async def read(self, since: datetime) -> Record:
        js = self.broker.config.connection_state.stream
        problems: list[str] = []
        decisions: list[DecisionRecord] = []
        transitions: list[InstanceTransitioned] = []
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                decisions, stopped = await self._decisions(js, since)
                if stopped is not None:
                    problems.append(f"only the newest {AUDIT_READ_MAX} decision records were read, back to {stopped}")
                transitions = await self._transitions(js, since)
        except (TimeoutError, nats.errors.Error, OSError) as error:
            log.warning("record read for an operator question failed: %r", error)
            problems.append(f"reading it failed ({type(error).__name__})")
        return Record(since=since, decisions=decisions, transitions=transitions, problem="; ".join(problems))

    async def _decisions(self, js: Any, since: datetime) -> tuple[list[DecisionRecord], str | None]:
        stream = AUDIT.name(self.subjects)
        info = await js.stream_info(stream)
        newest_first: list[DecisionRecord] = []
        seq = info.state.last_seq
        while seq >= max(info.state.first_seq, 1):
            if len(newest_first) >= AUDIT_READ_MAX:
                return newest_first[::-1], f"{newest_first[-1].started_at:%m-%d %H:%M} UTC"
            try:
                raw = await js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:  # a gap (deleted message): the next older one
                seq -= 1
                continue
            seq -= 1
            with contextlib.suppress(ValidationError):
                record = DecisionRecord.model_validate_json(raw.data or b"")
                if record.started_at < since:
                    break
                newest_first.append(record)
        return newest_first[::-1], None

    async def _transitions(self, js: Any, since: datetime) -> list[InstanceTransitioned]:
        found: list[InstanceTransitioned] = []
        subscription = await js.subscribe(
            self.subjects.fleet_instance_all,
            stream=INSTANCES.name(self.subjects),
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since),
        )
        try:
            while len(found) < TRANSITIONS_READ_MAX:
                try:
                    message = await subscription.next_msg(timeout=READ_IDLE_S)
                except nats.errors.TimeoutError:
                    break
                with contextlib.suppress(ValidationError):
                    found.append(InstanceTransitioned.model_validate_json(message.data))
                if message.metadata.num_pending == 0:
                    break
        finally:
            await subscription.unsubscribe()
        return found
