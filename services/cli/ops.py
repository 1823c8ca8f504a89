"""`fleetpilot status`, `publish task|queue`, `audit tail`: operating FleetPilot from a terminal, over NATS only.

Rendering is pure (services/cli/render.py); the NATS reads and writes are services/cli/bus_reads.py's.
Credentials come from FLEETPILOT_NATS_* like every service's: `operator` for status and audit, `jobs` for publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta

import typer
from pydantic import ValidationError
from rich.console import Console, Group
from rich.text import Text

from services.cli.bus_reads import (
    DecisionFilter,
    fetch_account_view,
    fetch_snapshot,
    publish_to_stream,
    recent_decisions,
    recently_gone,
)
from services.cli.render import (
    WIDE_WIDTH,
    InputError,
    api_key_line,
    build_event,
    decision_lines,
    foreign_summary,
    format_duration,
    one_line,
    parse_queue_depth,
    snapshot_table,
)
from shared.contract import (
    DecisionRecord,
    Event,
    InstanceState,
    QueueSnapshot,
    TaskEvent,
)
from shared.settings import Settings

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
        try:
            return now - timedelta(seconds=float(number) * units[unit])
        except OverflowError:  # `99999999999d`: further back than the calendar goes, so every decision kept
            return datetime.min.replace(tzinfo=UTC)
    try:
        moment = datetime.fromisoformat(since)
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (OverflowError, ValueError):  # not a moment, or `0001-01-01T00:00+05:00`, before the first UTC one
        raise typer.BadParameter(
            f"{since!r}: expected 30m, 2h, 1d or an ISO time such as 2026-03-02T08:00", param_hint="--since"
        ) from None


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
