"""`fleetpilot directives`: the operator's standing instructions to the decider, listed, added and revoked.

The decider stores them and answers on `<prefix>.decider.directives`; it refuses one that would loosen a
configured limit and says what an added one does, in numbers. Moments are UTC and parsed simply (see `--until`).
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import nats.errors
import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table

from services.cli.ask import operator_name
from services.cli.ops import fail_unreachable
from services.cli.terminal_text import cell, printable
from services.decider.directive_store import status_of
from shared.bus import problem_fields
from shared.contract.directives import (
    CapInstances,
    Directive,
    DirectiveAnswer,
    DirectiveKind,
    DirectiveList,
    DirectiveRequest,
    DrainBy,
    ExcludeGpuModel,
    ExcludeHost,
    SetLever,
)
from shared.service import connect_once
from shared.settings import Settings

SOURCE = "cli"
# an add asks fleet for its snapshot to say the effect (2 s at most), then answers; 5 s ran out on a loaded
# machine against a decider just started (CI: "no answer from the decider"), and a wrong "unknown" costs more than
# a wait. Nobody listening is answered at once (NATS no-responders), whatever this says
ASK_TIMEOUT_S = 15.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DIRECTIVE: TypeAdapter[Directive] = TypeAdapter(Directive)
WHEN_HELP = 'UTC: "18:00" (today, or tomorrow once past), "2026-12-05T17:00", or a duration from now: "90m", "4h", "2d"'

console = Console(highlight=False)
directives_app = typer.Typer(
    help="The operator's directives to the decider: list them, add one, revoke one.",
    invoke_without_command=True,
)


def parse_when(text: str, now: datetime) -> datetime:
    """A moment in UTC from what an operator types; ValueError naming what is expected."""
    text = text.strip()
    if match := _DURATION.match(text):
        try:
            return now + timedelta(seconds=float(match[1]) * _UNIT_S[match[2]])
        except (OverflowError, ValueError):  # "99999999d": past the last date there is
            raise ValueError(f"{text!r}: too far from now (a directive lives 31 days at most)") from None
    if re.fullmatch(r"\d{1,2}:\d{2}", text):
        hour, minute = (int(part) for part in text.split(":"))
        if hour > 23 or minute > 59:
            raise ValueError(f"{text!r}: not a time of day")
        today = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return today if today > now else today + timedelta(days=1)
    try:
        moment = datetime.fromisoformat(text)
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (OverflowError, ValueError):  # not a moment, or one past the last UTC datetime
        raise ValueError(f"{text!r}: expected {WHEN_HELP}") from None


def value_of(directive: Directive) -> str:
    """The directive's kind and value as an operator reads them."""
    if isinstance(directive, ExcludeGpuModel):
        return f"no {directive.gpu_model}"
    if isinstance(directive, ExcludeHost):
        return f"not host {directive.host_id}"
    if isinstance(directive, DrainBy):
        return f"drain by {directive.drain_by:%m-%d %H:%M}"
    if isinstance(directive, SetLever):
        return f"{directive.lever} {directive.state}"
    if isinstance(directive, CapInstances):
        return f"at most {directive.max_instances} machines"
    return f"at most ${directive.max_usd_per_h:.2f}/h"


def directive_fields(kind: str, value: str, now: datetime) -> dict[str, object]:
    """The kind's own field from VALUE; ValueError naming what the kind expects."""
    kind = DirectiveKind(kind.replace("-", "_")).value
    try:
        if kind == DirectiveKind.EXCLUDE_GPU_MODEL:
            return {"gpu_model": value}
        if kind == DirectiveKind.EXCLUDE_HOST:
            return {"host_id": int(value)}
        if kind == DirectiveKind.CAP_INSTANCES:
            return {"max_instances": int(value)}
        if kind == DirectiveKind.CAP_BUDGET:
            return {"max_usd_per_h": float(value.removeprefix("$").removesuffix("/h"))}
        if kind == DirectiveKind.DRAIN_BY:
            return {"drain_by": parse_when(value, now)}
    except ValueError:
        raise ValueError(f"{kind} {value!r}: expected {KIND_VALUES[kind]}") from None
    lever, _, state = value.partition("=")
    if not state:
        raise ValueError(f"lever {value!r}: expected {KIND_VALUES['lever']}")
    return {"lever": lever, "state": state}


KIND_VALUES = {
    "exclude_gpu_model": 'a GPU model, e.g. "RTX 4090"',
    "exclude_host": "a vast host id, e.g. 12345",
    "cap_instances": "a number of machines, e.g. 8",
    "cap_budget": "dollars per hour, e.g. 5.50",
    "drain_by": "a moment (as --until), e.g. 18:00",
    "lever": "park=on|off or bids=on|off",
}


def build_directive(
    kind: str, value: str, until: datetime, now: datetime, operator: str, instruction: str
) -> Directive:
    """The typed directive the CLI sends (the decider gives it its number and its time of receipt)."""
    try:
        fields = directive_fields(kind, value, now)
    except ValueError as error:
        if kind.replace("-", "_") not in KIND_VALUES:
            raise ValueError(f"{kind!r}: expected one of {', '.join(KIND_VALUES)}") from None
        raise error
    base = {
        "kind": kind.replace("-", "_"),
        "directive_id": 1,
        "set_at": now,
        "set_by": operator,
        "via": "cli",
        "instruction": instruction,
        "expires_at": until,
    }
    try:
        return _DIRECTIVE.validate_python({**base, **fields})
    except ValidationError as error:
        raise ValueError(problem_fields(error) or str(error)) from None


async def ask_decider(settings: Settings, request: DirectiveRequest) -> DirectiveList | DirectiveAnswer:
    client = await connect_once(settings)
    try:
        reply = await client.request(
            settings.subjects.decider_directives, request.model_dump_json().encode(), timeout=ASK_TIMEOUT_S
        )
    finally:
        await client.close()
    if request.operation == "list":
        try:
            return DirectiveList.model_validate_json(reply.data)
        except ValidationError:
            pass  # a malformed request is answered with a DirectiveAnswer
    return DirectiveAnswer.model_validate_json(reply.data)


def send(settings: Settings, request: DirectiveRequest) -> DirectiveList | DirectiveAnswer:
    """The decider's answer, or one line and a non-zero exit when nobody answers."""
    try:
        return asyncio.run(ask_decider(settings, request))
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        typer.echo(
            f"no answer from the decider on {settings.subjects.decider_directives} (is it running? fleetpilot run "
            "decider): the directives are unknown, not none",
            err=True,
        )
        raise typer.Exit(1) from None
    except (OSError, nats.errors.Error) as error:
        raise fail_unreachable(settings, error) from None


def directives_table(directives: list[Directive], now: datetime) -> Table:
    table = Table(box=None, pad_edge=False)
    said = any(directive.instruction for directive in directives)
    for column in ("#", "directive", "until (UTC)", "set by", "status", *(("why",) if said else ())):
        table.add_column(column, no_wrap=column != "why")
    for directive in directives:
        status = status_of(directive, now)
        if directive.revoked_at is not None:
            status = f"revoked by {directive.revoked_by}"
        style = "bold" if status == "active" else "dim"
        # an agent may set one with a GPU model the job system named, in words an operator typed: shown as written
        table.add_row(
            str(directive.directive_id),
            cell(value_of(directive)),
            f"{directive.expires_at:%m-%d %H:%M}",
            cell(f"{directive.set_by} ({directive.via})"),
            cell(status),
            *((cell(directive.instruction),) if said else ()),
            style=style,
        )
    return table


def answered(answer: DirectiveList | DirectiveAnswer) -> DirectiveAnswer:
    if isinstance(answer, DirectiveList):  # never for an add or revoke: the decider answers those in a line
        typer.echo("unexpected answer from the decider", err=True)
        raise typer.Exit(1)
    typer.echo(printable(answer.message), err=not answer.ok)  # it may quote the directive's words
    if not answer.ok:
        raise typer.Exit(1)
    return answer


@directives_app.callback()
def directives(ctx: typer.Context) -> None:
    """The operator's directives to the decider: list them, add one, revoke one."""
    if ctx.invoked_subcommand is not None:
        return
    settings = Settings()
    request = DirectiveRequest(occurred_at=datetime.now(UTC), source=SOURCE, operation="list", operator=operator_name())
    listing = send(settings, request)
    if isinstance(listing, DirectiveAnswer):
        typer.echo(printable(listing.message), err=True)
        raise typer.Exit(1)
    if listing.directives:
        console.print(directives_table(listing.directives, settings.make_clock().now()))
    elif listing.error is None:
        typer.echo("no directives: none active, none ended within the last 7 days")
    if listing.error is not None:
        typer.echo(f"the decider could not read every directive: {printable(listing.error)}", err=True)
        raise typer.Exit(1)


@directives_app.command("add")
def add(
    kind: str = typer.Argument(..., help=f"one of: {', '.join(KIND_VALUES)}"),
    value: str = typer.Argument(..., help="; ".join(f"{kind}: {what}" for kind, what in KIND_VALUES.items())),
    until: str = typer.Option(..., "--until", help=f"when it expires; {WHEN_HELP}"),
    by: str = typer.Option(None, "--by", help="who sets it (default: the login name)"),
    why: str = typer.Option("", "--why", help="the reason, in words, kept with it"),
) -> None:
    """Add a directive until a moment; prints what it does to the fleet now, or why the decider refused it."""
    settings = Settings()
    now = settings.make_clock().now()  # the stack's clock: simulated under `fleetpilot up`
    try:
        expires_at = parse_when(until, now)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--until") from None
    try:
        directive = build_directive(kind, value, expires_at, now, by or operator_name(), why)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="KIND VALUE") from None
    request = DirectiveRequest(
        occurred_at=now, source=SOURCE, operation="add", operator=by or operator_name(), directive=directive
    )
    answered(send(settings, request))


@directives_app.command("revoke")
def revoke(
    directive_id: int = typer.Argument(..., min=1, help="the directive's number, as `fleetpilot directives` lists it"),
    by: str = typer.Option(None, "--by", help="who revokes it (default: the login name)"),
) -> None:
    """Revoke a directive by its number: it binds no more from the decider's next run (within seconds)."""
    settings = Settings()
    request = DirectiveRequest(
        occurred_at=settings.make_clock().now(),
        source=SOURCE,
        operation="revoke",
        operator=by or operator_name(),
        directive_id=directive_id,
    )
    answered(send(settings, request))
