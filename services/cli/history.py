"""`fleetpilot history INSTANCE`: one machine's story from the record — every state fleet entered, every command
a decider run sent or was refused for it, what the provisioner answered, and its benchmark verdicts.

The story is built by a pure function from the streams' messages; reading them is the adapter below it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
import typer
from nats.js.api import DeliverPolicy
from pydantic import BaseModel, ValidationError

from services.cli.terminal_text import printable
from shared.contract import BenchResult, DecisionRecord, InstanceTransitioned, LaunchInstances, ProvisionResult
from shared.service import connect_once
from shared.settings import Settings
from shared.streams import AUDIT, BENCH, INSTANCES

M = TypeVar("M", bound=BaseModel)
READ_IDLE_S = 1.0  # an ordered consumer that delivers nothing for this long has delivered everything


@dataclass(frozen=True)
class StoryLine:
    at: datetime
    who: str  # fleet, decider, provisioner, bench
    what: str


def story_of(
    instance_id: int,
    transitions: Iterable[InstanceTransitioned],
    results: Iterable[ProvisionResult],
    decisions: Iterable[DecisionRecord],
    bench: Iterable[BenchResult],
) -> list[StoryLine]:
    """Everything the record says of one instance, oldest first."""
    results = list(results)
    launch_keys = {r.idempotency_key for r in results if r.command == "launch" and instance_id in r.instance_ids}
    lines = [_transition_line(t) for t in transitions if t.instance_id == instance_id]
    lines += [_result_line(r) for r in results if instance_id in r.instance_ids]
    for record in decisions:
        for verdict in record.verdicts:
            action = verdict.action
            targets = getattr(action, "instance_id", None) == instance_id
            launched_it = isinstance(action, LaunchInstances) and action.idempotency_key in launch_keys
            if targets or launched_it:
                lines.append(_verdict_line(record, verdict.verdict, verdict.rule, verdict.explanation, action))
    lines += [_bench_line(b) for b in bench if b.instance_id == instance_id]
    return sorted(lines, key=lambda line: line.at)


def _transition_line(t: InstanceTransitioned) -> StoryLine:
    moved = f"{t.from_state.value if t.from_state else 'new'} -> {t.to_state.value}"
    why = f" ({t.failure_reason.value})" if t.failure_reason else ""
    return StoryLine(t.occurred_at, "fleet", f"{moved}{why}: {t.detail}")


def _result_line(r: ProvisionResult) -> StoryLine:
    rule = f" [{r.refusal_rule.value}]" if r.refusal_rule else ""
    return StoryLine(
        r.occurred_at, "provisioner", f"{r.command} {r.outcome}{rule}: {r.detail} (key {r.idempotency_key})"
    )


def _verdict_line(record: DecisionRecord, verdict: str, rule: str | None, explanation: str, action: Any) -> StoryLine:
    sent = action.idempotency_key in record.commands_sent
    withheld = action.idempotency_key in record.commands_withheld
    fate = "sent" if sent else "withheld (shadow mode)" if withheld else verdict
    verb = type(action).__name__.removesuffix("Instances").removesuffix("Instance").lower()
    rule_text = f" by {rule}" if rule and verdict == "refused" else ""
    text = f"run {record.run_id}: {verb} ({action.requested_by}) {fate}{rule_text}: {explanation}"
    return StoryLine(record.started_at, "decider", text)


def _bench_line(b: BenchResult) -> StoryLine:
    return StoryLine(b.occurred_at, "bench", f"{b.kind} benchmark {b.verdict}: {b.explanation or b.error or ''}")


def render(instance_id: int, story: list[StoryLine]) -> list[str]:
    if not story:
        return [f"nothing recorded for instance {instance_id} (still within the streams' retention?)"]
    # a line's text quotes strangers: a vast.ai host's status message, a job system's worker id; one line each
    return [f"{line.at:%m-%d %H:%M:%S}  {line.who:<11}  {printable(line.what, single_line=True)}" for line in story]


# --- reading the streams ---


async def read_stream(js: Any, stream: str, subject: str, model: type[M]) -> list[M]:
    """Every message of `subject` in `stream` still kept, as `model` (one that does not validate is skipped)."""
    found: list[M] = []
    subscription = await js.subscribe(subject, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        while True:
            try:
                message = await subscription.next_msg(timeout=READ_IDLE_S)
            except nats.errors.TimeoutError:
                return found
            with contextlib.suppress(ValidationError):  # another shape on the subject: not part of the story
                found.append(model.model_validate_json(message.data))
            if message.metadata.num_pending == 0:
                return found
    finally:
        await subscription.unsubscribe()


async def read_record(settings: Settings, instance_id: int) -> list[StoryLine]:
    subjects = settings.subjects
    client = await connect_once(settings)  # the operator's credentials and inbox, as every command connects
    try:
        js = client.jetstream()
        instances = INSTANCES.name(subjects)
        transitions = await read_stream(js, instances, subjects.fleet_instance_all, InstanceTransitioned)
        results = await read_stream(js, instances, subjects.provision_result, ProvisionResult)
        decisions = await read_stream(js, AUDIT.name(subjects), subjects.decision_audit, DecisionRecord)
        bench = await read_stream(js, BENCH.name(subjects), subjects.bench_result, BenchResult)
    finally:
        await client.close()
    return story_of(instance_id, transitions, results, decisions, bench)


def history(instance_id: int = typer.Argument(..., help="the vast.ai instance id")) -> None:
    """One machine's story: its states, the commands sent or refused for it, the provisioner's answers, its bench."""
    settings = Settings()
    try:
        story = asyncio.run(read_record(settings, instance_id))
    except nats.js.errors.NotFoundError:
        typer.echo("no FleetPilot streams on this server yet: has any service started?", err=True)
        raise typer.Exit(1) from None
    except (OSError, nats.errors.Error) as error:
        typer.echo(f"cannot reach NATS at {settings.nats_url_for_humans}: {error!r}", err=True)
        raise typer.Exit(1) from None
    for line in render(instance_id, story):
        typer.echo(line)
