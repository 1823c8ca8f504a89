"""An operator's instruction as the model wrote it (one of the limit tools, tools.DIRECTIVE_TOOLS) made into a
typed directive, and the port that stores it: the decider's directive desk, which refuses one that would loosen a
configured limit (pure here; the storing is the port's)."""

from __future__ import annotations

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


def moment(text: str, now: datetime) -> datetime | None:
    """ "YYYY-MM-DD HH:MM" (or ISO) in UTC, or "HH:MM": its next occurrence after `now`."""
    text = text.strip().removesuffix("UTC").removesuffix("Z").strip()
    try:
        clock = time.fromisoformat(text)
    except ValueError:
        clock = None
    if clock is not None:
        today = datetime.combine(now.date(), clock, tzinfo=UTC)
        return today if today > now else today + timedelta(days=1)
    try:
        parsed = datetime.fromisoformat(text)
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
