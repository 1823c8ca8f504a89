"""The context manager (pure): what the model is sent each round, compacted and cut to a hard token budget.

The predecessor's context grew to 38k tokens from tool output alone. Here old tool results become one-line
placeholders that keep the gist, earlier observations become their summary, long outputs are cut with a note,
and the oldest history is dropped first; the system prompt (critical rules last) and the anchor never are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from services.decider.agent.memory import StoredModel
from services.decider.agent.tokens import estimate_message_tokens

Role = Literal["system", "user", "assistant", "tool"]
TurnKind = Literal["system", "anchor", "observation", "answer", "tool_request", "tool_result", "nudge"]

EARLIER_ANSWER_MAX_CHARS = 1_000
OBSERVATION_CUT_NOTE = "\n[observation cut to fit the token budget]"


class ContextBudgetError(RuntimeError):
    """The parts that are never dropped do not fit: a configuration error, not a run-time condition."""


class ToolRequest(StoredModel):
    name: str = Field(max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)


class Turn(StoredModel):
    role: Role
    kind: TurnKind
    content: str
    run_id: str = ""
    tool_name: str | None = None
    tool_calls: list[ToolRequest] = Field(default_factory=list)
    gist: str | None = Field(default=None, description="what replaces the content once compacted")

    def wire(self) -> dict[str, Any]:
        """The message as the Ollama chat API takes it."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_name:
            message["tool_name"] = self.tool_name
        if self.tool_calls:
            message["tool_calls"] = [self._wire_call(call) for call in self.tool_calls]
        return message

    @staticmethod
    def _wire_call(call: ToolRequest) -> dict[str, Any]:
        return {"function": {"name": call.name, "arguments": call.arguments}}

    @property
    def tokens(self) -> int:
        calls = [self._wire_call(call) for call in self.tool_calls]
        return estimate_message_tokens(self.role, self.content, self.tool_name, calls)


@dataclass(frozen=True)
class Fit:
    messages: list[Turn]
    tokens: int  # conservative estimate of the whole request: messages and tool schemas
    dropped_turns: int
    observation_cut: bool


def call_key(name: str, arguments: Any) -> str:
    """Two calls are exact duplicates when name and arguments match, whatever the key order."""
    return f"{name}:{json.dumps(arguments, sort_keys=True, default=str)}"


def cap_output(text: str, cap_chars: int, how_to_get_more: str) -> str:
    """Cut at a line break where possible, and say that it was cut and how to get the rest."""
    if len(text) <= cap_chars:
        return text
    note = f"\n[cut: output was {len(text)} chars, showing the first {{shown}}. {how_to_get_more}]"
    room = max(0, cap_chars - len(note) - 8)
    cut = text.rfind("\n", 0, room)
    shown = cut if cut > room // 2 else room
    return text[:shown] + note.format(shown=shown)


def compact(turns: Sequence[Turn], current_run_id: str, keep_recent: int) -> list[Turn]:
    """Tool results older than the last `keep_recent` messages become their gist; earlier runs' observations
    become their summary and their long answers are shortened."""
    out: list[Turn] = []
    first_recent = len(turns) - keep_recent
    for index, turn in enumerate(turns):
        earlier_run = turn.run_id != current_run_id
        old_result = turn.kind == "tool_result" and index < first_recent
        earlier_observation = turn.kind == "observation" and earlier_run
        if (old_result or earlier_observation) and turn.gist is not None:
            turn = turn.model_copy(update={"content": turn.gist})
        elif turn.kind == "answer" and earlier_run and len(turn.content) > EARLIER_ANSWER_MAX_CHARS:
            turn = turn.model_copy(update={"content": turn.content[:EARLIER_ANSWER_MAX_CHARS] + " …[shortened]"})
        out.append(turn)
    return out


def units(turns: Sequence[Turn]) -> list[list[Turn]]:
    """Turns that only make sense together: a tool request with its results. Dropped as a whole or not at all."""
    grouped: list[list[Turn]] = []
    for turn in turns:
        if turn.kind == "tool_result" and grouped and grouped[-1][0].kind == "tool_request":
            grouped[-1].append(turn)
        else:
            grouped.append([turn])
    return grouped


def _tokens(turns: Sequence[Turn]) -> int:
    return sum(turn.tokens for turn in turns)


def fit_to_budget(
    fixed: Sequence[Turn],
    history: Sequence[Turn],
    current: Sequence[Turn],
    tools_tokens: int,
    budget: int,
) -> Fit:
    """The request as sent: `fixed` (system prompt, anchor) always; then history, oldest dropped first; then this
    run's turns after its observation, oldest first; the observation itself is cut only as a last resort."""
    fixed_tokens = _tokens(fixed) + tools_tokens
    if fixed_tokens > budget:
        raise ContextBudgetError(
            f"system prompt, anchor and tool schemas take {fixed_tokens} tokens, over the budget of {budget}"
        )
    if not current or current[0].kind != "observation":
        raise ValueError("the current run must start with its observation")
    history_units = units(history)
    observation, rest = current[0], units(current[1:])
    total = fixed_tokens + _tokens(history) + _tokens(current)
    dropped = 0
    while total > budget and history_units:
        unit = history_units.pop(0)
        total -= _tokens(unit)
        dropped += len(unit)
    while total > budget and rest:
        unit = rest.pop(0)
        total -= _tokens(unit)
        dropped += len(unit)
    observation_cut = False
    if total > budget:
        room = budget - (total - observation.tokens)
        observation = _cut_to_tokens(observation, room)
        total = total - current[0].tokens + observation.tokens
        observation_cut = True
    messages = [*fixed, *(t for unit in history_units for t in unit), observation, *(t for unit in rest for t in unit)]
    return Fit(messages=messages, tokens=total, dropped_turns=dropped, observation_cut=observation_cut)


def _cut_to_tokens(turn: Turn, room_tokens: int) -> Turn:
    empty = turn.model_copy(update={"content": OBSERVATION_CUT_NOTE})
    if empty.tokens > room_tokens:
        raise ContextBudgetError(f"no room left for the observation ({room_tokens} tokens)")
    low, high = 0, len(turn.content)
    while low < high:  # the longest prefix that fits
        middle = (low + high + 1) // 2
        if turn.model_copy(update={"content": turn.content[:middle] + OBSERVATION_CUT_NOTE}).tokens <= room_tokens:
            low = middle
        else:
            high = middle - 1
    return turn.model_copy(update={"content": turn.content[:low] + OBSERVATION_CUT_NOTE})


def trim_history(turns: Sequence[Turn], max_turns: int) -> list[Turn]:
    """What is kept in Redis between runs: whole units, the most recent ones."""
    kept = units(turns)
    while kept and sum(len(u) for u in kept) > max_turns:
        kept.pop(0)
    return [t for unit in kept for t in unit]
