"""The command line's pure half: parsing what an operator types, and rendering contract models as rich tables
and lines (no I/O)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError
from rich.table import Table
from rich.text import Text

from services.cli.terminal_text import cell, printable
from shared.contract import (
    DecisionRecord,
    Event,
    FleetSnapshot,
    GuardrailVerdict,
    InstanceLine,
    InstanceState,
    LaunchInstances,
    QueueDepth,
    VastAccountObserved,
)

# the lifecycle in order, so the counts read like the fleet's pipeline
STATE_ORDER = list(InstanceState)
E = TypeVar("E", bound=Event)


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
        # the GPU model may be the job system's word, the vast status a host's: cells that show them as written
        "GPU": cell(f"{line.num_gpus}× {line.gpu_model}" if line.num_gpus > 1 else (line.gpu_model or "?")),
        "$/h": f"{line.price_usd_per_h:.2f}",
        "up": format_duration(up_s),
        "in state": format_duration((now - line.state_since).total_seconds()),
        "tasks/h": "-" if line.throughput_tasks_per_h is None else f"{line.throughput_tasks_per_h:.0f}",
        "tasks": str(line.tasks_completed),
        "last task": "-" if line.last_task_at is None else format_duration((now - line.last_task_at).total_seconds()),
        "host": "-" if line.host_id is None else str(line.host_id),
        "bench": cell(line.bench_verdict or "-"),
        # an upper estimate at its full price since created (`fleetpilot cost` has vast's own charges)
        "~$ so far": f"{line.price_usd_per_h * up_s / 3600:.2f}",
        "vast": cell(line.vast_status or "-"),
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
    if record.directives:
        lines.append(f"  directives in force: {', '.join(f'#{number}' for number in record.directives)}")
    if record.agent is not None and (record.agent.decision or record.agent.assessment):
        lines.append(f"  agent ({record.agent.status}): {record.agent.decision or record.agent.assessment}")
    lines.extend(f"  {describe_verdict(verdict)}" for verdict in record.verdicts)
    if record.commands_sent:
        lines.append(f"  commands sent: {', '.join(record.commands_sent)}")
    if record.mode == "shadow":
        withheld = ", ".join(record.commands_withheld) or "none"
        lines.append(f"  shadow mode (FLEETPILOT_DECIDER_MODE=shadow): commands withheld: {withheld}")
    # explanations quote what strangers wrote (a worker id, a host's status message), the agent's text too
    return [printable(line, single_line=True) for line in lines]


def api_key_line(account: VastAccountObserved) -> str:
    """A refused vast.ai key, said where an operator looks first; "" while vast.ai accepts it."""
    if account.api_key == "accepted":
        return ""
    detail = printable(account.api_key_detail, single_line=True)  # vast.ai's own words
    return (
        f"vast.ai REFUSED the API key (FLEETPILOT_VAST_API_KEY of the provisioner) at "
        f"{account.occurred_at:%Y-%m-%d %H:%M:%S} UTC: nothing can be listed or rented. {detail}"
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
        line = (
            f"  #{row.instance_id} {row.label or '(no label)'}{whose}: {row.gpu_model or '?'} "
            f"x{row.num_gpus or '?'}, {row.vast_actual_status or 'provisioning'}, {price}"
        )
        lines.append(printable(line, single_line=True))  # label, model, status: not ours to trust
    if account.unreadable_rows:
        lines.append(f"{account.unreadable_rows} row(s) of the last list were unreadable (see the provisioner's log)")
    return "\n".join(lines)


def one_line(record: DecisionRecord) -> str:
    """A decision in one line: when, the outcome, what was done, and the start of the policy's reason."""
    acts = [describe_verdict(v).split(":", 2) for v in record.verdicts]
    done = "; ".join(f"{mark.strip()} {what.strip()}" for mark, what, *_ in acts) or "no action"
    line = f"{record.started_at:%m-%d %H:%M:%S} {record.outcome.upper():<8} {done} | {record.recommendation}"
    line = printable(line, single_line=True)  # explanations quote what strangers wrote
    return line if len(line) <= ONE_LINE_CHARS else line[: ONE_LINE_CHARS - 1] + "…"


ONE_LINE_CHARS = 160
