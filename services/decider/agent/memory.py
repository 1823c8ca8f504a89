"""What the agent keeps between runs: memories, the plan and the session anchor, with their pure update rules."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.contract import UtcDatetime

MemoryCategory = Literal["decision", "fact", "failure", "preference"]
PlanStatus = Literal["pending", "in_progress", "completed"]
PlanPriority = Literal["high", "medium", "low"]

OPEN_CONCERNS_MAX = 5
ANCHOR_TEXT_MAX_CHARS = 400


class StoredModel(BaseModel):
    """Read back from Redis: anything that does not fit is treated as lost, never half-trusted."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Memory(StoredModel):
    category: MemoryCategory
    text: str = Field(min_length=1, max_length=1000)
    at: UtcDatetime
    run_id: str = ""


class PlanItem(StoredModel):
    content: str = Field(min_length=1, max_length=300)
    status: PlanStatus
    priority: PlanPriority


class Anchor(StoredModel):
    """A small summary of where the last run left things, injected right after the system prompt."""

    last_run_id: str
    last_run_at: UtcDatetime
    runs_total: int = Field(ge=0)
    fleet_summary: str = Field(max_length=ANCHOR_TEXT_MAX_CHARS)
    demand_summary: str = Field(max_length=ANCHOR_TEXT_MAX_CHARS)
    last_decision: str = Field(default="", max_length=ANCHOR_TEXT_MAX_CHARS)
    open_concerns: list[str] = Field(default_factory=list, max_length=OPEN_CONCERNS_MAX)


def _normalised(text: str) -> str:
    return re.sub(r"[\s.!]+", " ", text.casefold()).strip()


def remember(memories: list[Memory], new: Memory, limit: int) -> tuple[list[Memory], bool]:
    """Add `new` (most recent last). A repeat of a known text moves it to the end instead of adding it again.

    Returns the new list and whether the text was new. Beyond `limit` the oldest go first.
    """
    key = _normalised(new.text)
    kept = [m for m in memories if _normalised(m.text) != key]
    is_new = len(kept) == len(memories)
    kept.append(new)
    return kept[-limit:], is_new


def recent_memories(memories: list[Memory], count: int) -> list[Memory]:
    """Most recent first."""
    return list(reversed(memories[-count:])) if count else []


def replace_plan(items: list[PlanItem], limit: int) -> list[PlanItem]:
    """The model sends the whole plan each time; over the limit, completed items go first, then the lowest priority."""
    if len(items) <= limit:
        return list(items)
    rank = {"in_progress": 0, "pending": 1, "completed": 2}
    weight = {"high": 0, "medium": 1, "low": 2}
    ordered = sorted(range(len(items)), key=lambda i: (rank[items[i].status], weight[items[i].priority], i))
    keep = set(ordered[:limit])
    return [item for i, item in enumerate(items) if i in keep]


def open_items(plan: list[PlanItem]) -> list[PlanItem]:
    return [item for item in plan if item.status != "completed"]


def make_anchor(
    *,
    run_id: str,
    at: datetime,
    previous: Anchor | None,
    fleet_summary: str,
    demand_summary: str,
    last_decision: str,
    concerns: list[str],
) -> Anchor:
    return Anchor(
        last_run_id=run_id,
        last_run_at=at,
        runs_total=(previous.runs_total if previous else 0) + 1,
        fleet_summary=fleet_summary[:ANCHOR_TEXT_MAX_CHARS],
        demand_summary=demand_summary[:ANCHOR_TEXT_MAX_CHARS],
        last_decision=last_decision[:ANCHOR_TEXT_MAX_CHARS],
        open_concerns=[c[:ANCHOR_TEXT_MAX_CHARS] for c in concerns[:OPEN_CONCERNS_MAX]],
    )
