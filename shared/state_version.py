"""The version of a service's saved state, kept beside it in Redis, and what a starting service does with it.

Version 1 is the shape saved before any version was written: no marker. A service migrates each older version
it knows to its own. A version it does not know (a newer release's, or a damaged marker) is not read: the
service drops that state and rebuilds it from the bus and vast.ai, as it does after losing Redis, and says so.
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

# the shape written before the marker existed
UNVERSIONED = 1

log = logging.getLogger("fleetpilot.state")

Restore = Literal["current", "migrate", "rebuild"]


class StateVersion(BaseModel):
    """The marker: which service wrote the state next to it, in which version of its shape."""

    service: str
    version: int = Field(ge=1)


def marker(service: str, version: int) -> str:
    return StateVersion(service=service, version=version).model_dump_json()


def found_version(raw: bytes | str | None, service: str) -> int | None:
    """The version the marker names; UNVERSIONED when there is none; None when it cannot be read."""
    if raw is None:
        return UNVERSIONED
    try:
        stored = StateVersion.model_validate_json(raw)
    except ValidationError:
        return None
    return stored.version if stored.service == service else None


def restore_plan(found: int | None, current: int, known_older: frozenset[int]) -> Restore:
    if found == current:
        return "current"
    if found in known_older:
        return "migrate"
    return "rebuild"


def say_rebuild(service: str, found: int | None, current: int) -> None:
    what = "an unreadable version marker" if found is None else f"version {found}"
    log.warning(
        "%s: saved state has %s; this release reads versions 1 to %d: not reading it, rebuilding from the bus"
        " and vast.ai (as after a lost Redis)",
        service,
        what,
        current,
    )
