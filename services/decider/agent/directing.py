"""An operator's instruction as the model wrote it (one of the limit tools, tools.DIRECTIVE_TOOLS) made into a
typed directive, and the port that stores it: the decider's directive desk, which refuses one that would loosen a
configured limit (pure here; the storing is the port's)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from typing import Any, Protocol, runtime_checkable

import pydantic

from services.decider.agent.tools import DirectiveArgs
from shared.contract.directives import Directive, DirectiveAnswer, DirectiveKind

_DIRECTIVE = pydantic.TypeAdapter(Directive)
# a drain holds the fleet given back this long after its moment, unless revoked sooner: "drain everything by
# Friday 17:00" names the moment, not how long the fleet stays empty (the desk's answer says when it ends)
DRAIN_HOLD = timedelta(days=1)
# the one value each kind needs, named as the tool's argument and the directive's field
VALUE_FIELDS: dict[DirectiveKind, tuple[str, ...]] = {
    DirectiveKind.EXCLUDE_GPU_MODEL: ("gpu_model",),
    DirectiveKind.EXCLUDE_HOST: ("host_id",),
    DirectiveKind.CAP_INSTANCES: ("max_instances",),
    DirectiveKind.CAP_BUDGET: ("max_usd_per_h",),
    DirectiveKind.DRAIN_BY: ("drain_by",),
    DirectiveKind.LEVER: ("lever", "state"),
}


@runtime_checkable
class DirectivePorts(Protocol):
    """What a run's ports offer when the agent may store directives (the decider's desk: checked, stored, woken)."""

    async def add_directive(self, directive: Directive) -> DirectiveAnswer: ...


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CLOCK_12H = re.compile(r"^(\d{1,2})(?::(\d{2}))?\s*(am|pm)$")


def _clock(text: str) -> time | None:
    """ "HH:MM", or "9am" / "5:30 pm"."""
    twelve = _CLOCK_12H.match(text)
    if twelve:
        hour, minute, half = int(twelve.group(1)), int(twelve.group(2) or 0), twelve.group(3)
        if not 1 <= hour <= 12 or minute > 59:
            return None
        return time(hour % 12 + (12 if half == "pm" else 0), minute)
    try:
        return time.fromisoformat(text)
    except ValueError:
        return None


def moment(text: str, now: datetime) -> datetime | None:
    """A moment in UTC from "YYYY-MM-DD HH:MM" (or ISO); "HH:MM" (or "9am"): its next occurrence after `now`;
    "tomorrow HH:MM"; "<weekday> HH:MM": that weekday's next occurrence; "today": the end of today (midnight);
    "now" (or "immediately"): now."""
    text = " ".join(text.strip().lower().removesuffix("utc").removesuffix("z").split())
    if text in ("now", "right now", "immediately", "asap", "at once"):
        return now
    if text in ("today", "end of today", "end of day", "the end of the day"):
        return datetime.combine(now.date() + timedelta(days=1), time(0, 0), tzinfo=UTC)
    day, _, rest = text.partition(" ")
    if day == "tomorrow" and (clock := _clock(rest)) is not None:
        return datetime.combine(now.date() + timedelta(days=1), clock, tzinfo=UTC)
    if day.removesuffix("s") in _WEEKDAYS and (clock := _clock(rest)) is not None:
        ahead = (_WEEKDAYS.index(day.removesuffix("s")) - now.weekday()) % 7
        then = datetime.combine(now.date() + timedelta(days=ahead), clock, tzinfo=UTC)
        return then if then > now else then + timedelta(days=7)
    clock = _clock(text)
    if clock is not None:
        today = datetime.combine(now.date(), clock, tzinfo=UTC)
        return today if today > now else today + timedelta(days=1)
    try:
        parsed = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def directive_from(args: DirectiveArgs, *, now: datetime, operator: str, instruction: str) -> Directive | str:
    """The directive, or what is wrong with the call (the model is told, and may call again)."""
    expires_at = moment(args.until, now)
    if expires_at is None:
        return f'until {args.until!r} is not a moment: write "YYYY-MM-DD HH:MM" or "HH:MM" (UTC)'
    fields: dict[str, Any] = {}
    for name in VALUE_FIELDS[args.kind]:
        value = getattr(args, name)
        if value is None:
            return f"{args.kind.value} needs {name}"
        fields[name] = value
    if args.kind is DirectiveKind.DRAIN_BY:
        drain_by = moment(str(args.drain_by), now)
        if drain_by is None:
            return f"drain_by {args.drain_by!r} is not a moment"
        fields["drain_by"] = drain_by
        expires_at = max(expires_at, drain_by + DRAIN_HOLD)
    try:
        return _DIRECTIVE.validate_python(
            {
                "kind": args.kind,
                "directive_id": 1,  # numbered by the decider as it stores it
                "set_at": now,
                "set_by": operator[:64] or "operator",
                "via": "agent",
                "instruction": instruction[:500],
                "expires_at": expires_at,
                **fields,
            }
        )
    except pydantic.ValidationError as error:
        return "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in error.errors())[:300]
