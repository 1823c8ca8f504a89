"""`fleetpilot status`, `publish task|queue`, `audit tail`: operating FleetPilot from a terminal, over NATS only.

Rendering is pure (contract models in, rich renderables or strings out); the NATS calls sit at the bottom.
Credentials come from FLEETPILOT_NATS_* like every service's: `operator` for status and audit, `jobs` for publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from shared.contract import (
    DecisionRecord,
    Event,
    FleetSnapshot,
    FleetSnapshotRequest,
    GuardrailVerdict,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    QueueDepth,
    QueueSnapshot,
    TaskEvent,
    VastAccountObserved,
)
from shared.settings import Settings

if TYPE_CHECKING:  # NATS and the streams are imported by the commands that talk to them: --help needs neither
    from nats.aio.client import Client as NatsClient

SOURCE = "cli"
# the lifecycle in order, so the counts read like the fleet's pipeline
STATE_ORDER = list(InstanceState)
SnapshotOrigin = Literal["live", "published"]
E = TypeVar("E", bound=Event)
M = TypeVar("M", bound=BaseModel)


# --- pure: parsing and rendering ---


class InputError(ValueError):
    """Bad command-line input, said in terms of the field and the value."""


def describe_validation_error(error: ValidationError) -> str:
    """`field: what is wrong (got value)` for each problem, the way the services report bad messages."""
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "value"
        problems.append(f"{field}: {item['msg']} (got {item.get('input')!r})")
    return "; ".join(problems)


def parse_queue_depth(text: str) -> QueueDepth:
    """`TYPE=PENDING` or `TYPE=PENDING/RUNNING`, e.g. `proving=12/3`."""
    task_type, sep, counts = text.partition("=")
    if not sep or not task_type.strip():
        raise InputError(f"queue {text!r}: expected TYPE=PENDING or TYPE=PENDING/RUNNING, e.g. proving=12/3")
    pending_text, _, running_text = counts.partition("/")
    try:
        pending = int(pending_text)
        running = int(running_text) if running_text else 0
    except ValueError:
        raise InputError(f"queue {text!r}: pending and running must be whole numbers, got {counts!r}") from None
    try:
        return QueueDepth(task_type=task_type.strip(), pending=pending, running=running)
    except ValidationError as error:
        raise InputError(f"queue {text!r}: {describe_validation_error(error)}") from None


def build_event(model: type[E], **fields: Any) -> E:
    """A contract event from command-line values; a bad one is an InputError naming the field and the value."""
    present = {key: value for key, value in fields.items() if value is not None}
    try:
        return model(**present)
    except ValidationError as error:
        raise InputError(f"invalid {model.__name__}: {describe_validation_error(error)}") from None


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86_400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def snapshot_summary(snapshot: FleetSnapshot) -> str:
    total = sum(snapshot.counts_by_state.values())
    counts = ", ".join(
        f"{snapshot.counts_by_state[state]} {state.value}"
        for state in STATE_ORDER
        if snapshot.counts_by_state.get(state)
    )
    return (
        f"{total} instances ({counts or 'none'}): {snapshot.producing_instances} producing, "
        f"{snapshot.arriving_instances} arriving, ${snapshot.spend_usd_per_h:.2f}/h"
    )


NARROW_COLUMNS = ("instance", "state", "GPU", "$/h", "up", "in state", "tasks/h")
WIDE_COLUMNS = (*NARROW_COLUMNS, "tasks", "last task", "host", "bench", "~$ so far", "vast")
# in a narrow terminal the identifying columns stay whole; the rest wrap
NO_WRAP = frozenset({"instance", "state", "GPU", "$/h"})
WIDE_WIDTH = 160


def snapshot_table(
    snapshot: FleetSnapshot, *, wide: bool = False, states: frozenset[InstanceState] | None = None
) -> Table:
    """One row per instance (those in `states`, when given); ages are measured to the snapshot's own time (the
    demo's clock is not the wall's). Narrow fits 80 columns; wide adds the host, the bench verdict and the cost."""
    now = snapshot.occurred_at
    table = Table(title=snapshot_summary(snapshot), title_justify="left", expand=False)
    columns = WIDE_COLUMNS if wide else NARROW_COLUMNS
    for column in columns:
        justify = "left" if column in ("state", "GPU", "vast", "bench") else "right"
        table.add_column(column, justify=justify, no_wrap=column in NO_WRAP)  # type: ignore[arg-type]
    order = {state: n for n, state in enumerate(STATE_ORDER)}
    lines = [line for line in snapshot.instances if states is None or line.state in states]
    for line in sorted(lines, key=lambda i: (order[i.state], i.instance_id)):
        cells = _cells(line, now)
        table.add_row(*(cells[column] for column in columns))
    return table


def _cells(line: InstanceLine, now: datetime) -> dict[str, str | Text]:
    state = line.state.value + (f" ({line.failure_reason.value})" if line.failure_reason else "")
    up_s = (now - line.created_at).total_seconds()
    return {
        "instance": f"#{line.instance_id}",
        "state": Text(state, style=_state_style(line.state)),
        "GPU": f"{line.num_gpus}× {line.gpu_model}" if line.num_gpus > 1 else (line.gpu_model or "?"),
        "$/h": f"{line.price_usd_per_h:.2f}",
        "up": format_duration(up_s),
        "in state": format_duration((now - line.state_since).total_seconds()),
        "tasks/h": "-" if line.throughput_tasks_per_h is None else f"{line.throughput_tasks_per_h:.0f}",
        "tasks": str(line.tasks_completed),
        "last task": "-" if line.last_task_at is None else format_duration((now - line.last_task_at).total_seconds()),
        "host": "-" if line.host_id is None else str(line.host_id),
        "bench": line.bench_verdict or "-",
        # an upper estimate at its full price since created (`fleetpilot cost` has vast's own charges)
        "~$ so far": f"{line.price_usd_per_h * up_s / 3600:.2f}",
        "vast": line.vast_status or "-",
    }


def _state_style(state: InstanceState) -> str:
    if state is InstanceState.PRODUCING:
        return "green"
    if state is InstanceState.FAILED:
        return "bold red"
    if state in (InstanceState.DRAINING, InstanceState.GONE):
        return "dim"
    return "yellow"


def describe_verdict(verdict: GuardrailVerdict) -> str:
    action = verdict.action
    if isinstance(action, LaunchInstances):
        models = ", ".join(action.gpu_models) or "any GPU"
        what = f"launch {action.count} ({action.launch_priority}, {action.reason.value}, {models})"
    else:
        verb = type(action).__name__.removesuffix("Instance").lower()
        what = f"{verb} #{action.instance_id} ({action.reason.value})"
    mark = "allowed" if verdict.verdict == "allowed" else f"REFUSED by {verdict.rule or 'a guardrail'}"
    return f"{mark}: {what}: {verdict.explanation}"


def decision_lines(record: DecisionRecord) -> list[str]:
    """A decision as an operator reads it: when, why it ran, what it saw, what it did and why."""
    triggers = ", ".join(f"{t.priority}:{t.reason.value}" if t.reason else t.priority for t in record.triggers)
    lines = [
        f"{record.finished_at:%Y-%m-%d %H:%M:%S} UTC  run {record.run_id}  {record.outcome.upper()}"
        f"  (triggers: {triggers or 'none'}; {record.duration_s:.1f}s)",
        f"  data: demand signal {record.signal_freshness}, fleet snapshot {record.snapshot_freshness}",
    ]
    if record.signal is not None:
        lines.append(f"  demand: {record.signal.state.value}: {record.signal.explanation}")
    lines.append(f"  policy: {record.recommendation}")
    if record.agent is not None and (record.agent.decision or record.agent.assessment):
        lines.append(f"  agent ({record.agent.status}): {record.agent.decision or record.agent.assessment}")
    lines.extend(f"  {describe_verdict(verdict)}" for verdict in record.verdicts)
    if record.commands_sent:
        lines.append(f"  commands sent: {', '.join(record.commands_sent)}")
    if record.mode == "shadow":
        withheld = ", ".join(record.commands_withheld) or "none"
        lines.append(f"  shadow mode (FLEETPILOT_DECIDER_MODE=shadow): commands withheld: {withheld}")
    return lines


# --- adapters: NATS ---


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


def api_key_line(account: VastAccountObserved) -> str:
    """A refused vast.ai key, said where an operator looks first; "" while vast.ai accepts it."""
    if account.api_key == "accepted":
        return ""
    return (
        f"vast.ai REFUSED the API key (FLEETPILOT_VAST_API_KEY of the provisioner) at "
        f"{account.occurred_at:%Y-%m-%d %H:%M:%S} UTC: nothing can be listed or rented. {account.api_key_detail}"
    ).strip()


def foreign_summary(account: VastAccountObserved) -> str:
    """Instances on the account that are not this deployment's (no FleetPilot label, or another deployment's):
    listed so nobody wonders who pays for them."""
    if not account.foreign_count and not account.unreadable_rows:
        return ""
    lines = [
        f"{account.foreign_count} foreign instance(s) on the vast.ai account (not this deployment's; never touched):"
    ]
    for row in account.foreign_instances:
        price = f"${row.price_usd_per_h:.2f}/h" if row.price_usd_per_h is not None else "price unknown"
        whose = f" [FleetPilot deployment {row.deployment_id!r}]" if row.deployment_id else ""
        lines.append(
            f"  #{row.instance_id} {row.label or '(no label)'}{whose}: {row.gpu_model or '?'} "
            f"x{row.num_gpus or '?'}, {row.vast_actual_status or 'provisioning'}, {price}"
        )
    if account.unreadable_rows:
        lines.append(f"{account.unreadable_rows} row(s) of the last list were unreadable (see the provisioner's log)")
    return "\n".join(lines)


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


def one_line(record: DecisionRecord) -> str:
    """A decision in one line: when, the outcome, what was done, and the start of the policy's reason."""
    acts = [describe_verdict(v).split(":", 2) for v in record.verdicts]
    done = "; ".join(f"{mark.strip()} {what.strip()}" for mark, what, *_ in acts) or "no action"
    line = f"{record.started_at:%m-%d %H:%M:%S} {record.outcome.upper():<8} {done} | {record.recommendation}"
    return line if len(line) <= ONE_LINE_CHARS else line[: ONE_LINE_CHARS - 1] + "…"


ONE_LINE_CHARS = 160
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
    from shared.contract import InstanceTransitioned
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
    return [
        f"gone {t.occurred_at:%m-%d %H:%M}  #{t.instance_id} {t.gpu_model or '?'}: {t.detail}"[:160] for t in newest
    ]


# --- commands ---

console = Console(highlight=False)
publish_app = typer.Typer(
    help="Publish job-system events to FleetPilot (what a job system does; handy for testing).", no_args_is_help=True
)
audit_app = typer.Typer(help="Read the decision audit trail.", no_args_is_help=True)


def fail_unreachable(settings: Settings, error: BaseException) -> typer.Exit:
    """NATS down or refusing is an ordinary mistake of setup: one line with the URL (never its credentials)."""
    from shared.service import describe_nats_error

    typer.echo(
        f"error: cannot reach NATS at {settings.nats_url_for_humans} ({describe_nats_error(error)}): "
        "is it running, and is FLEETPILOT_NATS_URL right?",
        err=True,
    )
    return typer.Exit(2)


def status(
    timeout_s: float = typer.Option(3.0, "--timeout", help="seconds to wait for the fleet service to answer"),
    as_json: bool = typer.Option(False, "--json", help="print the FleetSnapshot as JSON instead of a table"),
    output: str = typer.Option("table", "-o", "--output", help="table (80 columns) or wide (host, bench, cost)"),
    state: list[str] = typer.Option(None, "--state", help="only instances in this state (repeat for several)"),
    all_instances: bool = typer.Option(False, "--all", help="also the machines gone lately, with why"),
    watch_s: float = typer.Option(None, "-w", "--watch", help="print it again every this many seconds"),
) -> None:
    """Show the fleet: every instance with its state, GPU, price, age and throughput (asks the fleet service)."""
    if output not in ("table", "wide"):
        raise typer.BadParameter(f"{output!r}: expected table or wide", param_hint="--output")
    known = {s.value for s in InstanceState}
    if bad := [name for name in state or [] if name not in known]:
        raise typer.BadParameter(f"{bad[0]!r}: expected one of {', '.join(sorted(known))}", param_hint="--state")
    states = frozenset(InstanceState(name) for name in state) if state else None
    while True:
        _status_once(timeout_s, as_json, output == "wide", states, all_instances)
        if watch_s is None:
            return
        time.sleep(max(1.0, watch_s))  # a person is watching: wall time


def _status_once(
    timeout_s: float, as_json: bool, wide: bool, states: frozenset[InstanceState] | None, all_instances: bool
) -> None:
    import nats.errors

    settings = Settings()
    try:
        found = asyncio.run(fetch_snapshot(settings, timeout_s))
    except (OSError, nats.errors.Error) as error:
        raise fail_unreachable(settings, error) from None
    if found is None:
        typer.echo(
            f"no fleet snapshot: nothing answered on {settings.subjects.fleet_snapshot} and none was published; "
            "is the fleet service running (fleetpilot run fleet)?",
            err=True,
        )
        raise typer.Exit(1)
    snapshot, origin = found
    if as_json:
        typer.echo(snapshot.model_dump_json(indent=2))
        return
    if origin == "published":
        age_s = (datetime.now(UTC) - snapshot.occurred_at).total_seconds()
        typer.echo(
            f"fleet did not answer within {timeout_s:.0f}s; this is the snapshot it published at "
            f"{snapshot.occurred_at:%Y-%m-%d %H:%M:%S} UTC ({format_duration(age_s)} ago by the wall clock)",
            err=True,
        )
    # wide is wide on purpose: its columns are not squeezed into an 80-column terminal
    (Console(highlight=False, width=max(console.width, WIDE_WIDTH)) if wide else console).print(
        snapshot_table(snapshot, wide=wide, states=states)
    )
    if all_instances:
        with contextlib.suppress(OSError, nats.errors.Error, ValidationError):
            for line in asyncio.run(recently_gone(settings)):
                typer.echo(line)
    with contextlib.suppress(OSError, nats.errors.Error, ValidationError):  # an extra line, never a failed status
        account = asyncio.run(fetch_account_view(settings))
        if account is not None and (summary := foreign_summary(account)):
            console.print(Text(summary))
        if account is not None and (refused := api_key_line(account)):
            console.print(Text(refused, style="bold red"))


@publish_app.command("task")
def publish_task(
    kind: str = typer.Argument(..., help="submitted, started, completed or failed"),
    task_id: str = typer.Argument(..., help="the job system's id of the task"),
    task_type: str = typer.Option("default", help="the kind of work, as the job system names it"),
    worker_id: str = typer.Option(None, help="the worker that started, completed or failed it"),
    instance_id: int = typer.Option(None, help="the vast.ai instance the worker runs on"),
    gpu_model: str = typer.Option(None, help="the worker's GPU model, e.g. 'RTX 4090'"),
    duration_s: float = typer.Option(None, help="run time in seconds, for completed and failed tasks"),
    event_id: str = typer.Option(None, help="reuse an id to make a retry idempotent (default: a new one)"),
    source: str = typer.Option("jobs", help="who reports it"),
    timeout_s: float = typer.Option(5.0, "--timeout", help="seconds to wait for JetStream's acknowledgement"),
) -> None:
    """Publish one task event (TaskEvent) to the DEMAND stream."""
    from shared.streams import DEMAND

    settings = Settings()
    try:
        event = build_event(
            TaskEvent,
            occurred_at=datetime.now(UTC),
            source=source,
            kind=kind,
            task_id=task_id,
            task_type=task_type,
            worker_id=worker_id,
            instance_id=instance_id,
            gpu_model=gpu_model,
            duration_s=duration_s,
            event_id=event_id,
        )
    except InputError as error:
        raise typer.BadParameter(str(error)) from None
    _publish(settings, settings.subjects.task(event.kind), event, DEMAND.name(settings.subjects), timeout_s)


@publish_app.command("queue")
def publish_queue(
    queues: list[str] = typer.Argument(
        ..., help="TYPE=PENDING or TYPE=PENDING/RUNNING per task type, e.g. proving=12/3 index=0"
    ),
    event_id: str = typer.Option(None, help="reuse an id to make a retry idempotent (default: a new one)"),
    source: str = typer.Option("jobs", help="who reports it"),
    timeout_s: float = typer.Option(5.0, "--timeout", help="seconds to wait for JetStream's acknowledgement"),
) -> None:
    """Publish the job system's queue as it stands now (QueueSnapshot) to the DEMAND stream."""
    from shared.streams import DEMAND

    settings = Settings()
    try:
        depths = [parse_queue_depth(text) for text in queues]
        event = build_event(
            QueueSnapshot, occurred_at=datetime.now(UTC), source=source, queues=depths, event_id=event_id
        )
    except InputError as error:
        raise typer.BadParameter(str(error)) from None
    _publish(settings, settings.subjects.queue, event, DEMAND.name(settings.subjects), timeout_s)


def _publish(settings: Settings, subject: str, event: Event, stream: str, timeout_s: float) -> None:
    import nats.errors

    try:
        published = asyncio.run(publish_to_stream(settings, subject, event, stream, timeout_s))
    except nats.errors.TimeoutError:
        # a publish the server refuses (permissions) or no stream captures gets no acknowledgement at all
        typer.echo(
            f"no acknowledgement for {subject}: is the {stream} stream declared (any service does it at start-up), "
            f"and may NATS user {settings.nats_user or '(none)'!r} publish there (the `jobs` user may)?",
            err=True,
        )
        raise typer.Exit(1) from None
    except (OSError, nats.errors.Error) as error:
        raise fail_unreachable(settings, error) from None
    if published.duplicate:
        typer.echo(f"{type(event).__name__} {event.event_id} was already stored ({published.stream}): not repeated")
    else:
        typer.echo(
            f"published {type(event).__name__} {event.event_id} on {published.subject} "
            f"({published.stream} #{published.seq})"
        )


OUTCOMES = ("hold", "acted", "stale", "refused", "degraded", "skipped")


def _outcome_option(outcome: str | None) -> str | None:
    if outcome is not None and outcome not in OUTCOMES:
        raise typer.BadParameter(f"{outcome!r}: expected one of {', '.join(OUTCOMES)}", param_hint="--outcome")
    return outcome


def _since_option(since: str | None, now: datetime) -> datetime | None:
    """`30m`, `2h`, `1d` before now, or an ISO moment (UTC when it names no zone)."""
    if since is None:
        return None
    units = {"m": 60, "h": 3600, "d": 86400}
    number, unit = since[:-1], since[-1:]
    if unit in units and number.replace(".", "", 1).isdigit():
        return now - timedelta(seconds=float(number) * units[unit])
    try:
        moment = datetime.fromisoformat(since)
    except ValueError:
        raise typer.BadParameter(
            f"{since!r}: expected 30m, 2h, 1d or an ISO time such as 2026-03-02T08:00", param_hint="--since"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@audit_app.command("tail")
def audit_tail(
    count: int = typer.Option(10, "-n", "--count", min=1, max=1000, help="how many recent decisions"),
    follow: bool = typer.Option(False, "-f", "--follow", help="keep printing new decisions as they are made"),
    as_json: bool = typer.Option(False, "--json", help="one DecisionRecord JSON per line"),
    oneline: bool = typer.Option(False, "--oneline", help="one line per decision: outcome, actions, reason"),
    instance: int = typer.Option(None, "--instance", help="only decisions with an action on this instance"),
    outcome: str = typer.Option(None, "--outcome", help="only this outcome: hold, acted, stale, refused, degraded"),
    since: str = typer.Option(None, "--since", help="only decisions since: 30m, 2h, 1d, or an ISO time"),
    poll_s: float = typer.Option(2.0, help="with --follow: seconds between looks"),
) -> None:
    """Print the most recent decisions with their explanations: triggers, data, policy, agent, guardrails."""
    import nats.errors
    import nats.js.errors

    from shared.streams import AUDIT

    settings = Settings()
    where = DecisionFilter(instance, _outcome_option(outcome), _since_option(since, datetime.now(UTC)))

    def show(records: list[tuple[int, DecisionRecord]]) -> None:
        for _, record in records:
            if as_json:
                typer.echo(record.model_dump_json())
            elif oneline:
                typer.echo(one_line(record))
            else:
                console.print(Group(*(Text(line) for line in decision_lines(record))))

    async def run() -> None:
        records = await recent_decisions(settings, count, where=where)
        if not records and not follow:
            typer.echo("no decisions recorded yet", err=True)
        show(records)
        last_seq = records[-1][0] if records else 0
        while follow:
            await asyncio.sleep(poll_s)  # a person is watching: wall time
            newer = await recent_decisions(settings, 1000, after_seq=last_seq, where=where)
            show(newer)
            last_seq = newer[-1][0] if newer else last_seq

    try:
        asyncio.run(run())
    except nats.js.errors.NotFoundError:
        typer.echo(f"no audit stream {AUDIT.name(settings.subjects)} yet: has any service started?", err=True)
        raise typer.Exit(1) from None
    except (OSError, nats.errors.Error) as error:
        raise fail_unreachable(settings, error) from None
    except KeyboardInterrupt:
        pass
