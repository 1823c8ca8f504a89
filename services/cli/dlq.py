"""`fleetpilot dlq list|show|replay|purge`: the dead letters kept in the DLQ stream, with why each was rejected;
a replay sends one back to where it was going, a purge deletes them.

Rendering is pure (DeadLetter in, lines out); the JetStream reads sit at the bottom.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer

from services.cli.bus_reads import connected, newest_first
from services.cli.errors import UserMistake
from services.cli.ops import fail_unreachable
from services.cli.terminal_text import printable
from shared.contract import DeadLetter
from shared.settings import Settings

# NATS and the streams are imported by the functions that talk to them: `fleetpilot dlq --help` needs neither
dlq_app = typer.Typer(help="Dead letters: messages a service rejected, with the reason.", no_args_is_help=True)

ERROR_PREVIEW_CHARS = 160
Found = TypeVar("Found")


# --- pure: rendering ---
# A dead letter is what a stranger sent: its payload and headers are the job system's raw bytes, its error quotes
# them. Every line is made printable, one line each, so a terminal escape in them is shown, never obeyed.


def summary_line(seq: int, letter: DeadLetter) -> str:
    first_problem = " ".join(letter.error.split())[:ERROR_PREVIEW_CHARS]
    line = (
        f"#{seq}  {letter.occurred_at:%Y-%m-%d %H:%M:%S}  {letter.service}  {letter.reason}  "
        f"{letter.original_subject}  (delivery {letter.delivery_count}): {first_problem}"
    )
    return printable(line, single_line=True)


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
    lines += ["  payload:", f"    {letter.payload}"]  # on one line: a newline in it is shown as \n, as sent
    return [printable(line, single_line=True) for line in lines]


# --- adapters: JetStream ---


async def read_dead_letters(settings: Settings, count: int, service: str | None = None) -> list[tuple[int, DeadLetter]]:
    """The newest `count` dead letters (oldest first), of one service when `service` is given."""
    from shared.streams import DLQ

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
    import nats.js.errors

    from shared.streams import DLQ

    async with connected(settings) as client:
        try:
            message = await client.jetstream().get_msg(DLQ.name(settings.subjects), seq)
        except nats.js.errors.NotFoundError:
            return None
    return DeadLetter.model_validate_json(message.data or b"")


def replay_headers(letter: DeadLetter) -> dict[str, str]:
    """The original headers, under a message id of the replay's own: JetStream would drop a copy under the
    original's id within its duplicate window, and two replays of one letter stay one message."""
    headers = {key: value for key, value in letter.headers.items() if key != "Nats-Msg-Id"}
    return {**headers, "Nats-Msg-Id": f"replay-{letter.event_id}"}


async def replay_dead_letter(settings: Settings, seq: int) -> DeadLetter | None:
    """Publish a dead letter's original bytes to its original subject, then delete it from the DLQ."""
    import nats.js.errors

    from shared.streams import DLQ

    stream = DLQ.name(settings.subjects)
    async with connected(settings) as client:
        js = client.jetstream()
        try:
            message = await js.get_msg(stream, seq)
        except nats.js.errors.NotFoundError:
            return None
        letter = DeadLetter.model_validate_json(message.data or b"")
        payload = base64.b64decode(letter.payload_base64)
        await js.publish(letter.original_subject, payload, headers=replay_headers(letter), timeout=5.0)
        await js.delete_msg(stream, seq)
    return letter


async def purge_dead_letters(settings: Settings, service: str | None) -> int:
    """Delete the dead letters (of one service when given); returns how many there were."""
    from shared.streams import DLQ

    stream = DLQ.name(settings.subjects)
    subject = settings.subjects.dead_letter(service) if service else None
    async with connected(settings) as client:
        js = client.jetstream()
        before = (await js.stream_info(stream, subjects_filter=subject)).state
        count = sum((before.subjects or {}).values()) if subject else before.messages
        await js.purge_stream(stream, subject=subject)
    return count


def check_service(service: str | None) -> None:
    from services.cli.main import SERVICES  # the CLI's entry point names them; imported late (it imports this)

    if service is not None and service not in SERVICES:
        raise UserMistake(f"--service {service!r}: expected one of {', '.join(sorted(SERVICES))}")


def run_reading(settings: Settings, reading: Coroutine[Any, Any, Found]) -> Found:
    import nats.errors
    import nats.js.errors

    from shared.streams import DLQ

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
    check_service(service)
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
    from shared.streams import DLQ

    settings = Settings()
    letter = run_reading(settings, read_dead_letter(settings, seq))
    if letter is None:
        typer.echo(f"no dead letter #{seq} in {DLQ.name(settings.subjects)} (see `fleetpilot dlq list`)", err=True)
        raise typer.Exit(1)
    for line in detail_lines(seq, letter):
        typer.echo(line)


@dlq_app.command("replay")
def dlq_replay(seq: int = typer.Argument(..., min=1, help="the number `fleetpilot dlq list` shows (#N)")) -> None:
    """Send one dead letter's original message to its original subject again (after a fix), and delete it."""
    from shared.streams import DLQ

    settings = Settings()
    letter = run_reading(settings, replay_dead_letter(settings, seq))
    if letter is None:
        typer.echo(f"no dead letter #{seq} in {DLQ.name(settings.subjects)} (see `fleetpilot dlq list`)", err=True)
        raise typer.Exit(1)
    subject = printable(letter.original_subject, single_line=True)  # where the stranger sent it
    typer.echo(f"replayed #{seq} to {subject} ({letter.service} will read it again); deleted it")


@dlq_app.command("purge")
def dlq_purge(
    service: str = typer.Option(None, help="only this service's (demand, fleet, provisioner, decider, bench)"),
    yes: bool = typer.Option(False, "--yes", help="really delete them (they cannot be replayed afterwards)"),
) -> None:
    """Delete the dead letters, all or one service's."""
    check_service(service)
    if not yes:
        raise UserMistake("dlq purge deletes dead letters for good: add --yes (see them first: fleetpilot dlq list)")
    settings = Settings()
    count = run_reading(settings, purge_dead_letters(settings, service))
    typer.echo(f"purged {count} dead letter(s){f' of {service}' if service else ''}")
