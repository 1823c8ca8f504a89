"""`fleetpilot dlq list|show`: the dead letters kept in the DLQ stream, with why each was rejected.

Rendering is pure (DeadLetter in, lines out); the JetStream reads sit at the bottom.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
import typer

from services.cli.ops import connected, fail_unreachable, newest_first
from shared.contract import DeadLetter
from shared.settings import Settings
from shared.streams import DLQ

dlq_app = typer.Typer(help="Dead letters: messages a service rejected, with the reason.", no_args_is_help=True)

ERROR_PREVIEW_CHARS = 160
Found = TypeVar("Found")


# --- pure: rendering ---


def summary_line(seq: int, letter: DeadLetter) -> str:
    first_problem = " ".join(letter.error.split())[:ERROR_PREVIEW_CHARS]
    return (
        f"#{seq}  {letter.occurred_at:%Y-%m-%d %H:%M:%S}  {letter.service}  {letter.reason}  "
        f"{letter.original_subject}  (delivery {letter.delivery_count}): {first_problem}"
    )


def detail_lines(seq: int, letter: DeadLetter) -> list[str]:
    lines = [
        f"dead letter #{seq} ({letter.event_id})",
        f"  when:     {letter.occurred_at:%Y-%m-%d %H:%M:%S} UTC",
        f"  service:  {letter.service}",
        f"  reason:   {letter.reason} (deliveries: {letter.delivery_count})",
        f"  subject:  {letter.original_subject}",
        "  error:",
        *(f"    {line}" for line in letter.error.splitlines()),
    ]
    if letter.headers:
        lines.append("  headers:")
        lines.extend(f"    {key}: {value}" for key, value in sorted(letter.headers.items()))
    lines += ["  payload:", f"    {letter.payload}"]
    return lines


# --- adapters: JetStream ---


async def read_dead_letters(settings: Settings, count: int, service: str | None = None) -> list[tuple[int, DeadLetter]]:
    """The newest `count` dead letters (oldest first), of one service when `service` is given."""
    found: list[tuple[int, DeadLetter]] = []
    letters = newest_first(settings, DLQ.name(settings.subjects), DeadLetter, "DLQ message")
    async with contextlib.aclosing(letters):  # stopping early closes the generator, and its connection, now
        async for seq, letter in letters:
            if service is None or letter.service == service:
                found.append((seq, letter))
            if len(found) >= count:
                break
    return list(reversed(found))


async def read_dead_letter(settings: Settings, seq: int) -> DeadLetter | None:
    async with connected(settings) as client:
        try:
            message = await client.jetstream().get_msg(DLQ.name(settings.subjects), seq)
        except nats.js.errors.NotFoundError:
            return None
    return DeadLetter.model_validate_json(message.data or b"")


def run_reading(settings: Settings, reading: Coroutine[Any, Any, Found]) -> Found:
    try:
        return asyncio.run(reading)
    except nats.js.errors.NotFoundError:
        typer.echo(f"no stream {DLQ.name(settings.subjects)} yet: run `fleetpilot streams ensure`", err=True)
        raise typer.Exit(1) from None
    except (OSError, nats.errors.Error) as error:
        raise fail_unreachable(settings, error) from None


# --- commands ---


@dlq_app.command("list")
def dlq_list(
    count: int = typer.Option(20, "-n", "--count", min=1, max=10_000, help="how many of the newest"),
    service: str = typer.Option(None, help="only this service's (demand, fleet, provisioner, decider, bench)"),
) -> None:
    """List the newest dead letters: number, time, service, reason, subject and the problem."""
    settings = Settings()
    letters = run_reading(settings, read_dead_letters(settings, count, service))
    if not letters:
        typer.echo("no dead letters", err=True)
        return
    for seq, letter in letters:
        typer.echo(summary_line(seq, letter))
    typer.echo("`fleetpilot dlq show NUMBER` prints one whole, with its payload", err=True)


@dlq_app.command("show")
def dlq_show(seq: int = typer.Argument(..., min=1, help="the number `fleetpilot dlq list` shows (#N)")) -> None:
    """Show one dead letter: the whole error, the headers and the original payload."""
    settings = Settings()
    letter = run_reading(settings, read_dead_letter(settings, seq))
    if letter is None:
        typer.echo(f"no dead letter #{seq} in {DLQ.name(settings.subjects)} (see `fleetpilot dlq list`)", err=True)
        raise typer.Exit(1)
    for line in detail_lines(seq, letter):
        typer.echo(line)
