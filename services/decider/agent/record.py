"""Answers from the record: what an operator's question about the past names (an instance, a day's cost, the wait,
a run at a clock time), looked up in the decision records and the fleet's transitions, as ready sentences with the
numbers. Pure: the record is read elsewhere (record_reader.py) and handed in.

A 0.5B model asked "why was 33032720 destroyed?" with only the fleet's present in view echoed the question; given
the sentence that answers it, it has only to pass it on, and the reply carries the numbers even when it does not.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Literal

from services.decider.agent.untrusted import one_line
from shared.contract import DecisionRecord, DemandSignal, FleetSnapshot, InstanceState, InstanceTransitioned
from shared.contract.fleet import committed_usd_per_h
from shared.untrusted_text import printable

RecordTopic = Literal["instance", "cost", "waiting", "decision_at"]

QUERIES_MAX = 3  # one question, at most three look-ups: the answer is one to three sentences
EXPLANATION_MAX_CHARS = 220  # a policy explanation quoted in an answer: its first clauses, whole
DECISION_NEAR_S = 10 * 60  # "why did you launch at 00:35?": a run within 10 min of it (runs are minutes apart)
RECORD_WINDOW_H = 48  # how far back a question is looked up: today and yesterday, whole

_INSTANCE_ID = re.compile(r"(?<![\d.:$])#?(\d{6,10})(?![\d.:])")  # vast ids have 7-9 digits; not a price or a time
# "at 00:35" asks what happened then; "until 18:00" sets a moment, it asks nothing of the past
_CLOCK = re.compile(r"\b(?:at|around|about)\s+([01]?\d|2[0-3])[:h]([0-5]\d)(?!\d)", re.I)
_COST = re.compile(r"\b(cost|costs|costed|spend|spent|spending|charge[ds]?|bill|paid|pay|money|dollars?)\b", re.I)
_WAIT = re.compile(r"\b(wait|waiting|waited|hold|holding|held|idle|not launch\w*|no launch\w*|why not)\b", re.I)
# an instruction ("spend up to $50/h") names a cost too: only a question is looked up
_ASKS = re.compile(r"\?|^\W*(what|why|how|when|which|who|tell|show|explain)\b", re.I)
_YESTERDAY = re.compile(r"\byesterday\b", re.I)
_UNBILLED = frozenset({InstanceState.GONE})


@dataclass(frozen=True)
class RecordQuery:
    topic: RecordTopic
    instance_id: int | None = None
    day: date | None = None
    at: time | None = None


@dataclass(frozen=True)
class Record:
    """What was read: the decision records and the instances' transitions since `since`, oldest first."""

    since: datetime
    decisions: Sequence[DecisionRecord] = ()
    transitions: Sequence[InstanceTransitioned] = ()
    problem: str = ""  # why the record could not be read (all of it or part): said, never taken as "nothing"


@dataclass(frozen=True)
class Present:
    """The fleet and demand now, for "why are we waiting?"."""

    now: datetime
    recommendation: str
    signal: DemandSignal | None = None
    snapshot: FleetSnapshot | None = None


@dataclass
class _Life:
    """One instance's billed time, assembled from its transitions."""

    gpu_model: str = "?"
    price_usd_per_h: float = 0.0
    hours: float = 0.0
    usd: float = 0.0
    first_at: datetime | None = None
    segments: list[tuple[datetime, datetime, float]] = field(default_factory=list)


def queries_in(text: str, now: datetime) -> list[RecordQuery]:
    """What a question asks the record, in the order it names them (at most QUERIES_MAX); nothing for an
    instruction."""
    found: list[RecordQuery] = []
    if not _ASKS.search(text):
        return found
    clocks = {m.start(): m for m in _CLOCK.finditer(text)}
    for match in _INSTANCE_ID.finditer(text):
        found.append(RecordQuery("instance", instance_id=int(match.group(1))))
    for match in clocks.values():
        found.append(RecordQuery("decision_at", at=time(int(match.group(1)), int(match.group(2)))))
    if _COST.search(text):
        day = now.date() - timedelta(days=1) if _YESTERDAY.search(text) else now.date()
        found.append(RecordQuery("cost", day=day))
    if _WAIT.search(text) and not found:
        found.append(RecordQuery("waiting"))
    return found[:QUERIES_MAX]


def answer(query: RecordQuery, record: Record, present: Present) -> str:
    if query.topic == "instance" and query.instance_id is not None:
        text = instance_answer(query.instance_id, record, present.now)
    elif query.topic == "cost" and query.day is not None:
        text = cost_answer(query.day, record, present.now)
    elif query.topic == "decision_at" and query.at is not None:
        text = decision_at_answer(query.at, record, present.now)
    else:
        text = waiting_answer(record, present)
    if record.problem:
        text += f" (The record is incomplete: {record.problem}.)"
    return text


def clip_sentence(text: str, limit: int = EXPLANATION_MAX_CHARS) -> str:
    """`text` up to its last whole clause within `limit`: never cut in the middle of one."""
    flat = " ".join(printable(text).split()).rstrip(" .;")  # a host's status message or a worker's name among it
    if len(flat) <= limit:
        return flat
    head = flat[:limit]
    cut = max(head.rfind("; "), head.rfind(". "), head.rfind(", "), head.rfind(": "))
    return head[:cut].rstrip(" .;,:") if cut > limit // 3 else head[: head.rfind(" ")].rstrip(" .;,:")


def _hhmm(moment: datetime, now: datetime) -> str:
    return f"{moment:%H:%M} UTC" if moment.date() == now.date() else f"{moment:%m-%d %H:%M} UTC"


# ---- one instance


def instance_answer(instance_id: int, record: Record, now: datetime) -> str:
    moves = [t for t in record.transitions if t.instance_id == instance_id]
    removal = _removal_verdict(instance_id, record.decisions)
    if not moves and removal is None:
        return f"The record since {_hhmm(record.since, now)} has nothing on instance {instance_id}."
    life = _lives(moves, record.since, now).get(instance_id, _Life())
    last = moves[-1] if moves else None
    said = f"Instance {instance_id}"
    if last is not None:
        said += f" ({one_line(last.gpu_model or '?', 40)} at ${last.price_usd_per_h:.2f}/h)"
    if removal is not None:
        run, verb, fate, why = removal
        done = {"destroy": "destroyed", "stop": "parked", "drain": "drained"}.get(verb, verb)
        when = _hhmm(run.started_at, now)
        if fate == "refused":
            said += f" was not {done}: a {verb} was refused at {when} in run {run.run_id}: {clip_sentence(why)}."
        else:
            said += f" was {done} at {when} by run {run.run_id}: {clip_sentence(why)}."
    elif last is not None:
        reason = f" ({last.failure_reason.value})" if last.failure_reason else ""
        detail = f": {clip_sentence(last.detail, 160)}" if last.detail else ""
        said += f" became {last.to_state.value}{reason} at {_hhmm(last.occurred_at, now)}{detail}."
    if last is not None and last.to_state is InstanceState.GONE and removal is not None:
        said += f" It was gone at {_hhmm(last.occurred_at, now)}."
    if life.hours > 0:
        said += f" It was rented {life.hours:.1f} h in the record, about ${life.usd:.2f} at its listed price."
    return said


Removal = tuple[DecisionRecord, str, str, str]  # the run, the verb, the verdict, the explanation


def _removal_verdict(instance_id: int, decisions: Sequence[DecisionRecord]) -> Removal | None:
    """The latest allowed removal of the instance (else the latest refused one): run, verb, verdict, explanation."""
    allowed: Removal | None = None
    refused: Removal | None = None
    for run in decisions:
        for verdict in run.verdicts:
            action = verdict.action
            if getattr(action, "instance_id", None) != instance_id or action.verb == "resume":
                continue
            found = (run, action.verb, verdict.verdict, verdict.explanation)
            if verdict.verdict == "allowed":
                allowed = found
            else:
                refused = found
    return allowed or refused


# ---- cost


def _lives(transitions: Sequence[InstanceTransitioned], since: datetime, now: datetime) -> dict[int, _Life]:
    """Each instance's billed segments: from each transition to the next (or now), at the price it then had. An
    instance already billed when the record starts counts from its start; its earlier hours are not known here."""
    lives: dict[int, _Life] = defaultdict(_Life)
    last: dict[int, InstanceTransitioned] = {}
    for move in sorted(transitions, key=lambda t: t.occurred_at):
        life = lives[move.instance_id]
        previous = last.get(move.instance_id)
        if previous is None and move.from_state is not None and move.from_state not in _UNBILLED:
            life.segments.append((since, move.occurred_at, move.price_usd_per_h))
        elif previous is not None and previous.to_state not in _UNBILLED:
            rate = committed_usd_per_h(previous.to_state, previous.park_reason, previous.price_usd_per_h, None)
            life.segments.append((previous.occurred_at, move.occurred_at, rate))
        life.first_at = life.first_at or move.occurred_at
        life.gpu_model = move.gpu_model or life.gpu_model
        life.price_usd_per_h = move.price_usd_per_h
        last[move.instance_id] = move
    for instance_id, move in last.items():
        if move.to_state not in _UNBILLED:
            rate = committed_usd_per_h(move.to_state, move.park_reason, move.price_usd_per_h, None)
            lives[instance_id].segments.append((move.occurred_at, now, rate))
    for life in lives.values():
        life.hours = sum((end - start).total_seconds() for start, end, _ in life.segments) / 3600
        life.usd = sum((end - start).total_seconds() / 3600 * rate for start, end, rate in life.segments)
    return lives


def cost_answer(day: date, record: Record, now: datetime) -> str:
    start = datetime.combine(day, time(0), tzinfo=now.tzinfo)
    end = min(start + timedelta(days=1), now)
    name = "Today" if day == now.date() else "Yesterday" if day == now.date() - timedelta(days=1) else f"{day}"
    if end <= start:
        return f"{name} ({day} UTC) has not begun."
    usd = 0.0
    machine_h = 0.0
    by_model: dict[str, float] = defaultdict(float)
    machines = 0
    for life in _lives(record.transitions, record.since, now).values():
        spent = 0.0
        for seg_start, seg_end, rate in life.segments:
            overlap_h = (min(seg_end, end) - max(seg_start, start)).total_seconds() / 3600
            if overlap_h > 0:
                spent += overlap_h * rate
                machine_h += overlap_h
        if spent > 0:
            machines += 1
            usd += spent
            by_model[life.gpu_model] += spent
    until = "" if end == start + timedelta(days=1) else f" until {end:%H:%M}"
    said = f"{name} ({day} UTC{until}) the fleet cost about ${usd:.2f} at listed prices: {machines} machines, "
    said += f"{machine_h:.1f} machine-hours"
    if by_model:
        model, dearest = max(by_model.items(), key=lambda item: item[1])
        said += f", most on {model} (${dearest:.2f})"
    said += "."
    if record.since > start:
        said += f" The record read starts at {_hhmm(record.since, now)}, so earlier hours are missing."
    return said + " vast.ai's own charges: fleetpilot cost."


# ---- the wait, and a run at a clock time


def waiting_answer(record: Record, present: Present) -> str:
    said = f"The policy now says: {clip_sentence(present.recommendation)}."
    signal, snapshot = present.signal, present.snapshot
    if signal is not None and snapshot is not None:
        said += (
            f" {signal.pending_tasks} tasks are queued and {snapshot.producing_instances} machines producing, "
            f"{snapshot.arriving_instances} arriving."
        )
    launches = [
        (run, verdict.action)
        for run in record.decisions
        for verdict in run.verdicts
        if verdict.verdict == "allowed" and verdict.action.verb == "launch"
    ]
    if launches:
        run, action = launches[-1]
        count = getattr(action, "count", 1)
        said += f" The last launch was {count} machines at {_hhmm(run.started_at, present.now)} (run {run.run_id})."
    return said


def decision_at_answer(at: time, record: Record, now: datetime) -> str:
    moment = datetime.combine(now.date(), at, tzinfo=now.tzinfo)
    if moment > now:
        moment -= timedelta(days=1)
    near = [r for r in record.decisions if abs((r.started_at - moment).total_seconds()) <= DECISION_NEAR_S]
    if not near:
        return f"No decider run is in the record within 10 min of {_hhmm(moment, now)}."
    acted = [r for r in near if r.verdicts]
    run = min(acted or near, key=lambda r: abs((r.started_at - moment).total_seconds()))
    done = "; ".join(_verdict_phrase(v.action, v.verdict, v.rule) for v in run.verdicts[:3]) or "changed nothing"
    return (
        f"At {_hhmm(run.started_at, now)} run {run.run_id} ({run.outcome}) {done}; "
        f"the policy said: {clip_sentence(run.recommendation)}."
    )


def _verdict_phrase(action: object, verdict: str, rule: str | None) -> str:
    verb = str(getattr(action, "verb", "act"))
    target = (
        f"{getattr(action, 'count', 1)} machines" if verb == "launch" else f"#{getattr(action, 'instance_id', '?')}"
    )
    if verdict == "allowed":
        return f"{verb} {target} allowed"
    return f"{verb} {target} refused by {rule or 'a guardrail'}"


# ---- the reply


_NUMBER = re.compile(r"\d+(?:\.\d+)?")
REPLY_MAX_CHARS = 7_000  # an OperatorReply holds 8,000: the rest is the numbers footer


def numbers_of(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


def reply_from_record(text: str, ready: Sequence[str]) -> str:
    """The model's reply when it carries every number of the record's answer; else the record's answer itself (a
    0.5B model echoes the question or rounds the figures away)."""
    if not ready:
        return clip_reply(text)
    needed = set().union(*(numbers_of(sentence) for sentence in ready))
    if needed <= numbers_of(text):
        return clip_reply(text)
    return clip_reply(" ".join(ready))


def clip_reply(text: str, limit: int = REPLY_MAX_CHARS) -> str:
    """At most `limit` characters, cut after a whole sentence (or line), never in the middle of one."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = max(head.rfind(". "), head.rfind(".\n"), head.rfind("\n"), head.rfind("? "), head.rfind("! "))
    return head[: cut + 1].rstrip() if cut > 0 else head[: head.rfind(" ")].rstrip() + " …"
