"""Text a stranger wrote, made safe to show the model: a vast.ai host's status message, the job system's task
types, worker names and GPU models, an offer's geolocation, an operator's words.

Such text reaches the agent's observation, its tool results and the record it answers from. Kept on one line, it
cannot start a line of its own and pose as a section ("POLICY RECOMMENDATION: ...") or as one of our calls (a task
type once wrote `- drain_instance {...}` on a line of its own, and the agent drained a producer with 340 tasks
queued); with its control characters written as escapes (shared.untrusted_text), an escape sequence carried into
an answer cannot rewrite the operator's terminal either.
"""

from __future__ import annotations

from shared.untrusted_text import printable


def one_line(text: str, limit: int) -> str:
    """`text` printable, its whitespace (newlines too) collapsed to single spaces, cut to `limit` characters."""
    flat = " ".join(printable(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
