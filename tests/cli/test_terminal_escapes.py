"""What strangers wrote reaches the operator's terminal shown, never obeyed: a vast.ai host's status message, a job
system's worker id and GPU model, a dead letter's bytes (an audit sent a window-title change, a screen clear and a
hyperlink through each)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from io import StringIO

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from rich.console import Console
from typer.testing import CliRunner

from services.cli.bus_reads import gone_line
from services.cli.dlq import detail_lines, summary_line
from services.cli.history import render, story_of
from services.cli.main import app
from services.cli.render import decision_lines, foreign_summary, snapshot_table
from services.cli.terminal_text import printable
from shared.contract import (
    DeadLetter,
    DecisionRecord,
    FleetSnapshot,
    ForeignInstance,
    InstanceLine,
    InstanceState,
    InstanceTransitioned,
    OperatorMessage,
    OperatorReply,
    VastAccountObserved,
)
from shared.settings import Settings

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
ESC = "\x1b"
# retitle the window, clear the screen, home the cursor, then a reassuring green lie
HOSTILE = f"Error{ESC}]0;owned{ESC}\\{ESC}[2J{ESC}[H{ESC}[32mall 12 machines healthy{ESC}[0m"
MARKUP_GPU = "[link=https://evil.example]RTX 4090[/link] [blink red]x[/]"


def transitioned(detail: str, to_state: InstanceState = InstanceState.FAILED) -> InstanceTransitioned:
    return InstanceTransitioned(
        occurred_at=NOW, source="fleet", instance_id=4242, from_state=InstanceState.LOADING, to_state=to_state,
        gpu_model="RTX 4090", price_usd_per_h=0.5, detail=detail,
    )  # fmt: skip


def snapshot_with(gpu_model: str, vast_status: str) -> FleetSnapshot:
    line = InstanceLine(
        instance_id=777, state=InstanceState.PRODUCING, gpu_model=gpu_model, vast_status=vast_status,
        price_usd_per_h=0.5, created_at=NOW - timedelta(hours=1), state_since=NOW - timedelta(minutes=5),
        line="#777 producing",
    )  # fmt: skip
    return FleetSnapshot(
        occurred_at=NOW, source="fleet", instances=[line], counts_by_state={InstanceState.PRODUCING: 1},
        spend_usd_per_h=0.5, producing_instances=1, arriving_instances=0,
    )  # fmt: skip


def on_a_terminal(renderable: object) -> str:
    """The bytes a colour terminal receives: rich's own styles, and whatever it let through."""
    out = StringIO()
    Console(file=out, force_terminal=True, color_system="truecolor", width=200, highlight=False).print(renderable)
    return out.getvalue()


def as_read(renderable: object) -> str:
    console = Console(record=True, width=200, highlight=False, file=StringIO())
    console.print(renderable)
    return console.export_text()


def test_printable_shows_each_control_character_as_its_escape_and_leaves_text_alone() -> None:
    assert printable(HOSTILE) == "Error\\x1b]0;owned\\x1b\\\\x1b[2J\\x1b[H\\x1b[32mall 12 machines healthy\\x1b[0m"
    assert printable("a\x9b2Jb\rc\x7f\x00") == "a\\x9b2Jb\\rc\\x7f\\x00"  # C1 CSI, CR, DEL, NUL
    assert printable("gone \u202edeyortsed") == "gone \\u202edeyortsed"  # a bidi override shown, not obeyed
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"
    assert printable("two\nlines\tand a tab", single_line=True) == "two\\nlines\\tand a tab"
    assert printable("RTX 4090 · Sverige – 0,42 €/h ✓") == "RTX 4090 · Sverige – 0,42 €/h ✓"


def test_history_shows_a_hosts_status_message_without_its_escapes() -> None:
    story = story_of(4242, [transitioned(f"vast says exited: {HOSTILE}")], [], [], [])
    [line] = render(4242, story)
    assert ESC not in line
    assert "vast says exited: Error\\x1b]0;owned" in line and "\\x1b[2J" in line


def test_history_keeps_a_worker_id_with_a_newline_on_its_own_line() -> None:
    worker = f"w1{ESC}[2J\nPOLICY RECOMMENDATION: destroy 777"
    story = story_of(4242, [transitioned(f"first task event from {worker}", InstanceState.PRODUCING)], [], [], [])
    lines = render(4242, story)
    assert len(lines) == 1 and ESC not in lines[0]
    assert "first task event from w1\\x1b[2J\\nPOLICY RECOMMENDATION" in lines[0]


def test_a_gone_line_of_status_all_shows_the_detail_without_its_escapes() -> None:
    line = gone_line(transitioned(f"vast says: {HOSTILE}", InstanceState.GONE))
    assert ESC not in line and "#4242 RTX 4090: vast says: Error\\x1b]0;owned" in line


def test_status_shows_a_gpu_model_with_markup_literally_and_a_vast_status_without_escapes() -> None:
    table = snapshot_table(snapshot_with(MARKUP_GPU, HOSTILE), wide=True)
    sent = on_a_terminal(table)
    assert f"{ESC}]8;" not in sent, "the GPU model became a hyperlink"
    assert f"{ESC}[5" not in sent, "the GPU model's [blink] became a style"
    assert f"{ESC}]0;" not in sent and f"{ESC}[2J" not in sent, "the vast status reached the terminal"
    text = as_read(table)
    assert MARKUP_GPU in text
    assert "Error\\x1b]0;owned" in text


def test_dlq_show_prints_a_payload_and_headers_with_escapes_shown() -> None:
    letter = DeadLetter(
        occurred_at=NOW, source="demand", service="demand", reason="invalid_message",  # type: ignore[arg-type]
        error=f"task_id: bad value {HOSTILE!r}", original_subject="fp.demand.task.submitted",
        payload=f'{{"task_id":"{ESC}]0;owned\x07{ESC}[2J"}}\nsecond line', payload_base64="",
        headers={"Nats-Msg-Id": f"{ESC}[31mred"},
    )  # fmt: skip
    lines = detail_lines(1, letter)
    assert not [line for line in lines if ESC in line or "\x07" in line]
    assert '    {"task_id":"\\x1b]0;owned\\x07\\x1b[2J"}\\nsecond line' in lines
    assert "    Nats-Msg-Id: \\x1b[31mred" in lines
    assert ESC not in summary_line(1, letter)


def test_audit_tail_and_status_footer_show_quoted_strangers_without_escapes() -> None:
    record = DecisionRecord(
        occurred_at=NOW, source="decider", run_id="r1", triggers=[], started_at=NOW, finished_at=NOW, duration_s=1.0,
        signal_freshness="fresh", snapshot_freshness="fresh", outcome="hold",
        recommendation=f"hold: #4242 said {HOSTILE}",
    )  # fmt: skip
    assert not [line for line in decision_lines(record) if ESC in line]
    account = VastAccountObserved(
        occurred_at=NOW, source="provisioner", foreign_count=1,
        foreign_instances=[ForeignInstance(instance_id=1, label=f"x{ESC}[2J", gpu_model=MARKUP_GPU)],
    )  # fmt: skip
    summary = foreign_summary(account)
    assert ESC not in summary and "x\\x1b[2J" in summary


async def test_ask_prints_the_agents_reply_with_a_quoted_worker_id_shown_not_obeyed(
    settings: Settings, nc: NatsClient
) -> None:
    """The agent's answer quotes the record: "first task event from <worker id>" with the job system's bytes."""

    async def answer(msg: Msg) -> None:
        asked = OperatorMessage.model_validate_json(msg.data)
        reply = OperatorReply(
            occurred_at=NOW, source="decider", conversation_id=asked.conversation_id, in_reply_to=asked.event_id,
            text=f"#777 started producing: first task event from w1{HOSTILE}\nspend $0.50/h",
        )  # fmt: skip
        await nc.publish(settings.subjects.operator_reply, reply.model_dump_json().encode())

    await nc.subscribe(settings.subjects.operator_message, cb=answer)
    await nc.flush()  # the server knows this stand-in for the decider before the CLI asks
    env = {"FLEETPILOT_NATS_URL": settings.nats_url, "FLEETPILOT_SUBJECT_PREFIX": settings.subject_prefix}
    done = await asyncio.to_thread(
        CliRunner().invoke, app, ["ask", "what happened to 777?", "--timeout", "30"], env=env
    )
    assert done.exit_code == 0, done.stderr
    assert ESC not in done.stdout
    assert "first task event from w1Error\\x1b]0;owned" in done.stdout
    assert done.stdout.splitlines()[1] == "spend $0.50/h", "a reply keeps its own lines"
