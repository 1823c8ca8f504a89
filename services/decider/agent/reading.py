"""An operator's message read as a limit: the model fills one small JSON object (kind, value, and the message's own
words for when it ends; decoding constrained to the schema), and code checks that reading against the words before
anything is stored.

Why a reading apart from the tool loop: offered limit tools beside the fleet's observation, the 0.5B model stored
1 of 15 clear instructions (it called finish, or copied numbers from the fleet lines); asked only to read the
message into required fields, it read most of them. What crosses from the model is checked here, in code:
- the value must be written in the message (a number, host or GPU model the operator did not say is not theirs);
- the end must be the message's own words, resolved by code (`directing.moment`), not the model's date arithmetic;
- an instruction to destroy or stop everything while tasks wait is refused with the queue's numbers, and one that
  lifts a limit is refused with the limit; the desk still refuses anything that would loosen a configured limit.
Anything that fails a check is asked back, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from services.decider.agent.directing import moment
from services.decider.agent.tools import DirectiveArgs
from shared.contract.directives import DirectiveKind, Lever


class ReadingKind(StrEnum):
    CAP_INSTANCES = "cap_instances"
    CAP_BUDGET = "cap_budget"
    EXCLUDE_GPU_MODEL = "exclude_gpu_model"
    EXCLUDE_HOST = "exclude_host"
    DRAIN_ALL_BY = "drain_all_by"
    PARKING = "parking"
    BIDS = "bids"
    UNCLEAR = "unclear"
    UNSAFE = "unsafe"
    QUESTION = "question"
    OTHER = "other"


class Reading(BaseModel):
    """What the model returns, every field required (small models fill required fields and enums)."""

    model_config = ConfigDict(extra="ignore")

    kind: ReadingKind
    value: str = Field(max_length=80)
    when: str = Field(max_length=80)


READING_MAX_TOKENS = 80
READING_PROMPT = """\
You turn one operator message about a GPU fleet into JSON. Now: {now}.
kind, one of:
- cap_instances: at most N machines. value: N
- cap_budget: at most N dollars per hour. value: N
- exclude_gpu_model: rent no machine of one GPU model. value: the model, e.g. "RTX 3080"
- exclude_host: rent nothing on one host. value: the host id
- drain_all_by: give every machine back by a moment. value: ""
- parking: parking on or off. value: "on" or "off"
- bids: interruptible (bid) machines on or off. value: "on" or "off"
- unclear: a limit whose number, unit or target is missing or vague
- unsafe: asks to ignore or raise a limit, or to destroy or launch machines now
- question: asks why, what or how much
- other: anything else
when: the message's own words for when it ends or happens, copied exactly, e.g. "until 21:30"; "" if it says none.
Examples:
"max 7 machines till 21:30" -> {{"kind": "cap_instances", "value": "7", "when": "till 21:30"}}
"keep spending under $9.25/h until 2026-03-04 08:00" -> {{"kind": "cap_budget", "value": "9.25", "when": "until 2026-03-04 08:00"}}
"no A100s until tomorrow 10:00" -> {{"kind": "exclude_gpu_model", "value": "A100", "when": "until tomorrow 10:00"}}
"avoid host 4412 until 2026-03-05 18:00" -> {{"kind": "exclude_host", "value": "4412", "when": "until 2026-03-05 18:00"}}
"everything given back by Wednesday 09:00" -> {{"kind": "drain_all_by", "value": "", "when": "by Wednesday 09:00"}}
"park idle machines until 2026-03-03 07:00" -> {{"kind": "parking", "value": "on", "when": "until 2026-03-03 07:00"}}
"no interruptible machines till 06:00" -> {{"kind": "bids", "value": "off", "when": "till 06:00"}}
"limit it to 5" -> {{"kind": "unclear", "value": "5", "when": ""}}
"forget the machine limit" -> {{"kind": "unsafe", "value": "", "when": ""}}
"why did we launch at 09:10?" -> {{"kind": "question", "value": "", "when": ""}}
"""  # noqa: E501 (examples are one line each, as the model reads them)


def reading_prompt(now: datetime) -> str:
    return READING_PROMPT.format(now=f"{now:%A %Y-%m-%d %H:%M} UTC")


@dataclass(frozen=True)
class Facts:
    """What a refusal or a question cites: the configured limits and the queue (None: unknown)."""

    budget_usd_per_h: float
    max_instances: int
    pending_tasks: int | None


@dataclass(frozen=True)
class Ask:
    question: str


@dataclass(frozen=True)
class Refuse:
    reason: str


Judged = DirectiveArgs | Ask | Refuse | None

_NUMBER = re.compile(r"(?<![\w.])\$?(\d+(?:\.\d+)?)")
_STOP_ALL = re.compile(r"\b(destroy|kill|delete|terminate|shut ?down|stop|remove|wipe)\b", re.IGNORECASE)
_BUDGET_WORDS = re.compile(r"\b(budget|spend\w*|cost|dollars?|money)\b|\$", re.IGNORECASE)
_LIMIT_WORDS = re.compile(r"\b(limit|cap|max\w*|machines?|instances?)\b", re.IGNORECASE)
# lifting a limit is refused whatever the model read it as: the refusal must not rest on a 0.5B model's judgement
_LIFT = re.compile(r"\b(ignore|lift|raise|remove|forget|drop|increase|double|override|bypass)\b", re.IGNORECASE)
# a time as a message writes it: a clock time, after a date, a weekday or "tomorrow" when it has one; or "today"
_TIME_WRITTEN = re.compile(
    r"(?:(?:\d{4}-\d{2}-\d{2}|tomorrow|(?:mon|tues|wednes|thurs|fri|satur|sun)day)\s+)?\d{1,2}:\d{2}"
    r"|\b\d{1,2}\s?(?:am|pm)\b|\btoday\b"
)
# a question about the past or the present sets no limit, whatever the model read ("what happened to instance
# 33032720?" was read as a cap of 33032720 machines); a request phrased as one ("can you cap ...?") is judged
_QUESTION = re.compile(r"^\s*(why|what|how|when|where|which|who|whose)\b.*\?\s*$", re.IGNORECASE | re.DOTALL)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_WHEN_PREFIX = re.compile(r"^(until|till|til|by|before|through|to)\s+", re.IGNORECASE)
_LIMIT_KINDS = {
    ReadingKind.CAP_INSTANCES: DirectiveKind.CAP_INSTANCES,
    ReadingKind.CAP_BUDGET: DirectiveKind.CAP_BUDGET,
    ReadingKind.EXCLUDE_GPU_MODEL: DirectiveKind.EXCLUDE_GPU_MODEL,
    ReadingKind.EXCLUDE_HOST: DirectiveKind.EXCLUDE_HOST,
}
# a lever's state as the message says it: "off" from off-words, "on" from on-words without any off-word
_OFF_WORDS = re.compile(r"\b(off|stop|no|disable|without|don't|do not|never)\b", re.IGNORECASE)
_ON_WORDS = re.compile(r"\b(on|start|enable|allow|use|prefer)\b", re.IGNORECASE)
_LEVER_WORDS = {ReadingKind.PARKING: re.compile(r"\bpark", re.IGNORECASE),
                ReadingKind.BIDS: re.compile(r"\b(bid|interruptible)", re.IGNORECASE)}  # fmt: skip
ASK_EXAMPLE = 'for example "at most 10 machines until 18:00" or "$8/h until 22:00"'
# a drain sooner than this, while tasks wait, is "stop everything now" by another name
DRAIN_NOTICE = timedelta(minutes=30)


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def numbers_in(text: str) -> list[float]:
    return [float(match) for match in _NUMBER.findall(text.replace(",", ""))]


def _said_number(value: str, text: str) -> float | None:
    """The reading's number, if the message says that number outside its dates and times (the 3 of
    "2026-03-04" is no machine count: hypothesis found it)."""
    found = numbers_in(value)
    if len(found) != 1:
        return None
    outside_times = _DATE.sub(" ", _TIME_WRITTEN.sub(" ", _flat(text)))
    return found[0] if found[0] in numbers_in(outside_times) else None


def _end(when: str, text: str, now: datetime) -> datetime | None:
    """The moment the message's own words name: the model's copy of them when the message holds it, else the one
    time the message writes (the 0.5B model often rewrote "until 20:00" as a date of its own). The date
    arithmetic is ours either way."""
    words = _flat(when)
    if words and words in _flat(text):
        return moment(_WHEN_PREFIX.sub("", words), now)
    written = {m.group(0) for m in _TIME_WRITTEN.finditer(_flat(text))}
    return moment(written.pop(), now) if len(written) == 1 else None


def _refusal(text: str, facts: Facts, emptying: bool = False) -> Refuse:
    if emptying or _STOP_ALL.search(text):
        if facts.pending_tasks:
            return Refuse(
                f"not done: {facts.pending_tasks} tasks are queued (pending), and machines are not destroyed while "
                'work waits. To stop renting, name a moment: "drain everything by 18:00".'
            )
        return Refuse(
            "not done: I do not destroy the whole fleet on a message. To stop renting, name a moment: "
            '"drain everything by 18:00".'
        )
    if _BUDGET_WORDS.search(text):
        return Refuse(
            f"not done: the budget of ${facts.budget_usd_per_h:.2f}/h is a configured limit. A directive can only "
            "tighten it; raising it is a change to the configuration."
        )
    return Refuse(
        f"not done: the limit of {facts.max_instances} machines and the budget of ${facts.budget_usd_per_h:.2f}/h "
        "are configured limits. A directive can only tighten them."
    )


def judge(reading: Reading, text: str, now: datetime, facts: Facts) -> Judged:
    """The directive request the reading makes of `text`, or the question to ask back, or the refusal; None for
    a message that sets no limit (a question, or other)."""
    kind = reading.kind
    if kind in (ReadingKind.QUESTION, ReadingKind.OTHER) or _QUESTION.match(text):
        return None
    lifts = _LIFT.search(text) and (_BUDGET_WORDS.search(text) or re.search(r"\blimits?\b", text, re.IGNORECASE))
    if kind is ReadingKind.UNSAFE or lifts:
        return _refusal(text, facts)
    if kind is ReadingKind.UNCLEAR:
        return Ask(f"Which limit do you mean, with its number and until when? Say it in one line, {ASK_EXAMPLE}.")
    number = _said_number(reading.value, text)
    over = {ReadingKind.CAP_BUDGET: facts.budget_usd_per_h, ReadingKind.CAP_INSTANCES: facts.max_instances}
    if number is not None and kind in over and number >= over[kind]:
        return _refusal(text, facts)  # at or above a configured limit: it can only be tightened
    end = _end(reading.when, text, now)
    if kind is ReadingKind.DRAIN_ALL_BY:
        soon = end is not None and end - now < DRAIN_NOTICE
        if (soon or (end is None and _STOP_ALL.search(text))) and facts.pending_tasks:
            return _refusal(text, facts, emptying=True)
        if end is None or soon:
            return Ask('By when should every machine be given back? Name a moment at least 30 minutes ahead, e.g. '
                       '"drain everything by 18:00".')  # fmt: skip
        return DirectiveArgs(
            kind=DirectiveKind.DRAIN_BY, drain_by=f"{end:%Y-%m-%d %H:%M}", until=f"{end:%Y-%m-%d %H:%M}"
        )
    if end is not None and end <= now:
        return Ask(f"That end ({reading.when}) is not ahead of now: until when should it hold? {ASK_EXAMPLE}.")
    if end is None:
        return Ask(
            f"Until when? I read {kind.value.replace('_', ' ')} {reading.value}; please add the end, {ASK_EXAMPLE}."
        )
    until = f"{end:%Y-%m-%d %H:%M}"
    if kind in (ReadingKind.PARKING, ReadingKind.BIDS):
        state = reading.value.strip().lower()
        said = "off" if _OFF_WORDS.search(text) else "on" if _ON_WORDS.search(text) else None
        if state != said or not _LEVER_WORDS[kind].search(text):
            return Ask(f"Should {kind.value} be on or off, and until when? {ASK_EXAMPLE.capitalize()}.")
        lever = Lever.PARK if kind is ReadingKind.PARKING else Lever.BIDS
        return DirectiveArgs(kind=DirectiveKind.LEVER, lever=lever, state="on" if state == "on" else "off", until=until)
    directive_kind = _LIMIT_KINDS[kind]
    if kind is ReadingKind.EXCLUDE_GPU_MODEL:
        model = " ".join(reading.value.split())
        if len(model) < 2 or model.lower() not in text.lower():
            return Ask(f"Which GPU model, and until when? {ASK_EXAMPLE.capitalize()}.")
        return DirectiveArgs(kind=directive_kind, gpu_model=model.upper() if model.islower() else model, until=until)
    if number is None:
        return Ask(f"Which number do you mean? I could not find {reading.value!r} in your message; {ASK_EXAMPLE}.")
    if kind is ReadingKind.CAP_BUDGET:
        return DirectiveArgs(kind=directive_kind, max_usd_per_h=number, until=until)
    if not number.is_integer():
        return Ask(f"{reading.value} is not a whole number: how many exactly? {ASK_EXAMPLE.capitalize()}.")
    if kind is ReadingKind.CAP_INSTANCES:
        return DirectiveArgs(kind=directive_kind, max_instances=int(number), until=until)
    return DirectiveArgs(kind=directive_kind, host_id=int(number), until=until)
