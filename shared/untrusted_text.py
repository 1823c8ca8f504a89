"""Text that strangers wrote (a vast.ai host's status message, the job system's task types and worker names, a
dead-lettered message's bytes), made safe to show: on the operator's terminal, where an escape sequence would be
obeyed, and to the agent's model, where a line break would start a line of our own. Shown as written, never
acted on."""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls: a terminal acts on them instead of showing them. ESC starts the sequences
# that retitle the window, clear the screen or plant a hyperlink (an audit sent all three through a vast.ai status
# message), U+009B is a one-character CSI on some terminals, CR lets a later text overwrite an earlier one.
# The bidi controls too: they reorder what is shown, so `destroyed` can read as something else.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# harmless in a multi-line text: they move the cursor down or right, never over what is already shown
LAYOUT_CHARACTERS = frozenset("\n\t")


def printable(text: str, *, single_line: bool = False) -> str:
    """A text a stranger wrote (a vast.ai host's status message, a job system's worker id, a dead letter's bytes),
    safe to print: each control character is written as its escape (ESC as `\\x1b`), so the terminal acts on
    nothing and the operator still sees that something was there. Newlines and tabs stay, unless `single_line`:
    a field on one line of a listing or one table cell must not break its line."""

    def shown(match: re.Match[str]) -> str:
        character = match.group()
        if character in LAYOUT_CHARACTERS and not single_line:
            return character
        return character.encode("unicode_escape").decode("ascii")

    return CONTROL_CHARACTERS.sub(shown, text)
