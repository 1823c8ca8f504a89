"""Text that strangers wrote, printed on the operator's terminal: `printable` (shared.untrusted_text) for lines,
`cell` for rich tables, where markup would be obeyed too."""

from __future__ import annotations

from rich.text import Text

from shared.untrusted_text import printable

__all__ = ["cell", "printable"]


def cell(text: str) -> Text:
    """A table cell shown as written: rich reads a plain str cell as markup, so `[link=...]` in a GPU model
    would become a hyperlink and `[blink]` a style."""
    return Text(printable(text, single_line=True))
