"""The stand-in's own count of the prompt it received, standing in for a real tokenizer's prompt_eval_count.

Model-like, not conservative: a letter run costs a token per 5 letters, a digit one, a run of punctuation one per
2 marks, a non-ASCII character one, and each message and the tool list carry a template's fixed overhead.
"""

from __future__ import annotations

import json
import re
from typing import Any

MESSAGE_TEMPLATE_TOKENS = 5  # <|im_start|>role\n ... <|im_end|>\n
TOOLS_TEMPLATE_TOKENS = 10

_LETTER_RUN = re.compile(r"[A-Za-z]+")
_DIGIT = re.compile(r"[0-9]")
_PUNCT_RUN = re.compile(r"[!-/:-@\[-`{-~]+")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_WHITESPACE_TOKEN = re.compile(r"\s{2,}|[^\S ]")


def count_text(text: str) -> int:
    letters = sum((len(run) + 4) // 5 for run in _LETTER_RUN.findall(text))
    punctuation = sum((len(run) + 1) // 2 for run in _PUNCT_RUN.findall(text))
    return (
        letters
        + len(_DIGIT.findall(text))
        + punctuation
        + len(_NON_ASCII.findall(text))
        + len(_WHITESPACE_TOKEN.findall(text))
    )


def count_message(message: dict[str, Any]) -> int:
    total = MESSAGE_TEMPLATE_TOKENS + count_text(str(message.get("role") or ""))
    total += count_text(str(message.get("content") or ""))
    total += count_text(str(message.get("tool_name") or ""))
    for call in message.get("tool_calls") or []:
        total += count_text(json.dumps(call))
    return total


def count_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    total = sum(count_message(m) for m in messages)
    if tools:
        total += TOOLS_TEMPLATE_TOKENS + count_text(json.dumps(tools))
    return total
