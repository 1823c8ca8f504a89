"""`fleetpilot ask "TEXT"`: send the agent an operator message and print its reply.

The message goes to the OPERATOR stream (a P0 wake-up for the decider); the reply is the first message on the
operator reply subject with this conversation id. Permissions: the NATS `operator` user may do both.
A question never makes the fleet act: the run it starts answers from the audit trail and the current state,
and refuses every command (rule `operator_question`); the next run another trigger starts acts as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import uuid
from datetime import UTC, datetime

import nats
import typer
from nats.aio.msg import Msg
from pydantic import ValidationError

from services.cli.ops import fail_unreachable
from services.cli.terminal_text import printable
from shared.bus import event_headers
from shared.contract import OperatorMessage, OperatorReply
from shared.service import connect_once
from shared.settings import Settings
from shared.streams import OPERATOR

SOURCE = "cli"


def operator_name() -> str:
    with contextlib.suppress(Exception):
        return getpass.getuser()[:64] or "operator"
    return "operator"


async def ask_and_wait(settings: Settings, message: OperatorMessage, timeout_s: float) -> OperatorReply | None:
    """Publish `message` and wait (wall time: a person is waiting) for the reply in its conversation."""
    subjects = settings.subjects
    client = await connect_once(settings)
    answered: asyncio.Future[OperatorReply] = asyncio.get_running_loop().create_future()

    async def on_reply(msg: Msg) -> None:
        try:
            reply = OperatorReply.model_validate_json(msg.data)
        except ValidationError:
            return  # not ours to judge: the decider's own dead-letter path covers its output
        if reply.conversation_id == message.conversation_id and not answered.done():
            answered.set_result(reply)

    try:
        # subscribe before publishing, so a fast reply is not missed
        subscription = await client.subscribe(subjects.operator_reply, cb=on_reply)
        await client.jetstream().publish(
            subjects.operator_message,
            message.model_dump_json().encode(),
            stream=OPERATOR.name(subjects),
            headers=event_headers(message),
            timeout=5.0,
        )
        try:
            return await asyncio.wait_for(answered, timeout=timeout_s)
        except TimeoutError:
            return None
        finally:
            await subscription.unsubscribe()
    finally:
        await client.close()


def ask(
    text: str = typer.Argument(..., help='what to ask the agent, e.g. "why did you launch two machines?"'),
    operator: str = typer.Option(None, help="who is asking (default: the login name)"),
    conversation: str = typer.Option(None, help="continue a conversation by its id (default: a new one)"),
    timeout_s: float = typer.Option(180.0, "--timeout", help="seconds to wait for the reply"),
) -> None:
    """Ask the fleet agent a question; it answers from the audit trail and the current state, and acts on nothing."""
    settings = Settings()
    if not text.strip():
        raise typer.BadParameter("the question is empty", param_hint="TEXT")
    message = OperatorMessage(
        occurred_at=datetime.now(UTC),
        source=SOURCE,
        conversation_id=conversation or f"cli-{uuid.uuid4().hex[:12]}",
        operator=operator or operator_name(),
        text=text[:4000],
    )
    try:
        reply = asyncio.run(ask_and_wait(settings, message, timeout_s))
    except (OSError, nats.errors.Error) as error:
        raise fail_unreachable(settings, error) from None
    if reply is None:
        typer.echo(
            f"no reply within {timeout_s:.0f} s in conversation {message.conversation_id}: is the decider running "
            "(fleetpilot run decider) with the agent (FLEETPILOT_DECIDER_ADVISOR)?",
            err=True,
        )
        raise typer.Exit(1)
    # the agent's words quote what strangers wrote (a worker id, a host's status message): shown, never obeyed
    typer.echo(printable(reply.text))
    typer.echo(f"(conversation {reply.conversation_id})", err=True)
