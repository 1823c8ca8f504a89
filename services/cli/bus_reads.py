"""The command line's reads and writes over NATS: the fleet snapshot, the account view, the audit trail and
streams read newest first, and publishing to a stream. Credentials come from FLEETPILOT_NATS_* like every
service's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from services.cli.render import describe_validation_error
from services.cli.terminal_text import printable
from shared.contract import (
    DecisionRecord,
    Event,
    FleetSnapshot,
    FleetSnapshotRequest,
    InstanceState,
    InstanceTransitioned,
    VastAccountObserved,
)
from shared.settings import Settings

if TYPE_CHECKING:  # NATS and the streams are imported by the commands that talk to them: --help needs neither
    from nats.aio.client import Client as NatsClient

SOURCE = "cli"
SnapshotOrigin = Literal["live", "published"]
M = TypeVar("M", bound=BaseModel)


@contextlib.asynccontextmanager
async def connected(settings: Settings) -> AsyncIterator[NatsClient]:
    from shared.service import connect_once

    client = await connect_once(settings)
    try:
        yield client
    finally:
        await client.close()


async def fetch_snapshot(settings: Settings, timeout_s: float) -> tuple[FleetSnapshot, SnapshotOrigin] | None:
    """Ask fleet; when nobody answers, fall back to the snapshot fleet last published. None: neither exists."""
    import nats.errors
    import nats.js.errors

    from shared.streams import LATEST

    subjects = settings.subjects
    request = FleetSnapshotRequest(occurred_at=datetime.now(UTC), source=SOURCE)
    async with connected(settings) as client:
        try:
            reply = await client.request(subjects.fleet_snapshot, request.model_dump_json().encode(), timeout=timeout_s)
            return FleetSnapshot.model_validate_json(reply.data), "live"
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        try:
            stored = await client.jetstream().get_last_msg(LATEST.name(subjects), subjects.fleet_snapshot_published)
        except nats.js.errors.NotFoundError:
            return None
        return FleetSnapshot.model_validate_json(stored.data or b""), "published"


async def fetch_account_view(settings: Settings) -> VastAccountObserved | None:
    """The provisioner's last view of the vast.ai account (foreign instances); None when it published none."""
    import nats.js.errors

    from shared.streams import LATEST

    async with connected(settings) as client:
        try:
            stored = await client.jetstream().get_last_msg(
                LATEST.name(settings.subjects), settings.subjects.provision_account
            )
        except nats.js.errors.NotFoundError:
            return None
    return VastAccountObserved.model_validate_json(stored.data or b"")


@dataclass(frozen=True)
class Published:
    subject: str
    stream: str
    seq: int
    duplicate: bool


async def publish_to_stream(
    settings: Settings, subject: str, event: Event, stream: str, timeout_s: float = 5.0
) -> Published:
    """JetStream publish with Nats-Msg-Id = event_id: a retried publish of the same event is stored once."""
    from shared.bus import event_headers

    async with connected(settings) as client:
        ack = await client.jetstream().publish(
            subject, event.model_dump_json().encode(), headers=event_headers(event), stream=stream, timeout=timeout_s
        )
    return Published(subject, ack.stream, ack.seq, bool(ack.duplicate))


async def newest_first(
    settings: Settings, stream: str, model: type[M], what: str, after_seq: int = 0
) -> AsyncGenerator[tuple[int, M], None]:
    """A stream's messages as `model`, newest first with their sequence, down to `after_seq` (exclusive); a
    message deleted meanwhile is passed over, one that does not validate is said on stderr and passed over."""
    import nats.js.errors

    async with connected(settings) as client:
        js = client.jetstream()
        state = (await js.stream_info(stream)).state
        for seq in range(state.last_seq, max(state.first_seq, after_seq + 1, 1) - 1, -1):
            try:
                message = await js.get_msg(stream, seq)
                yield seq, model.model_validate_json(message.data or b"")
            except nats.js.errors.NotFoundError:
                pass  # deleted by age or limits
            except ValidationError as error:
                typer.echo(f"skipping {what} #{seq}: {describe_validation_error(error)}", err=True)


@dataclass(frozen=True)
class DecisionFilter:
    """Which decisions `audit tail` shows: those acting on one instance, of one outcome, since a moment."""

    instance_id: int | None = None
    outcome: str | None = None
    since: datetime | None = None

    def matches(self, record: DecisionRecord) -> bool:
        if self.outcome is not None and record.outcome != self.outcome:
            return False
        if self.since is not None and record.started_at < self.since:
            return False
        if self.instance_id is None:
            return True
        return any(getattr(v.action, "instance_id", None) == self.instance_id for v in record.verdicts)

    def is_past(self, record: DecisionRecord) -> bool:
        """Older than `since`: reading newest first, nothing further back can match."""
        return self.since is not None and record.started_at < self.since


SCAN_LIMIT = 20_000  # decision records read back at most while looking for matches


async def recent_decisions(
    settings: Settings, count: int, after_seq: int = 0, where: DecisionFilter | None = None
) -> list[tuple[int, DecisionRecord]]:
    """The last `count` decision records (oldest first) with their stream sequence, newer than `after_seq`, that
    match `where` (all when None)."""
    from shared.streams import AUDIT

    found: list[tuple[int, DecisionRecord]] = []
    where = where or DecisionFilter()
    records = newest_first(settings, AUDIT.name(settings.subjects), DecisionRecord, "decision record", after_seq)
    async with contextlib.aclosing(records):  # stopping early closes the generator, and its connection, now
        scanned = 0
        async for seq, record in records:
            scanned += 1
            if where.is_past(record) or scanned > SCAN_LIMIT:
                break
            if where.matches(record):
                found.append((seq, record))
            if len(found) >= count:
                break
    return list(reversed(found))


async def recently_gone(settings: Settings, limit: int = 50) -> list[str]:
    """The machines fleet saw go, newest first, each with what removed it (from the instance stream)."""
    from services.cli.history import read_stream
    from shared.streams import INSTANCES

    subjects = settings.subjects
    async with connected(settings) as client:
        gone = await read_stream(
            client.jetstream(), INSTANCES.name(subjects), subjects.fleet_instance(InstanceState.GONE),
            InstanceTransitioned,
        )  # fmt: skip
    if not gone:
        return ["no machine gone within the stream's retention"]
    newest = sorted(gone, key=lambda t: t.occurred_at, reverse=True)[:limit]
    return [gone_line(t) for t in newest]


GONE_LINE_CHARS = 160  # as wide as the table of `status -o wide` above it


def gone_line(t: InstanceTransitioned) -> str:
    # the GPU model may be the job system's word, the detail quote a vast.ai host's status message
    line = f"gone {t.occurred_at:%m-%d %H:%M}  #{t.instance_id} {t.gpu_model or '?'}: {t.detail}"
    return printable(line, single_line=True)[:GONE_LINE_CHARS]
