"""A conservative token count: never below what a byte-level BPE tokenizer makes of the same text.

Why not chars/3: the observation is dense with ids, prices and rates, and models such as qwen split every digit
into its own token, so `#33032712 $0.50/h` is ~16 tokens for 17 chars. Counted here: a letter run as one token
per 3 letters (real vocabularies hold most words whole), every digit and punctuation mark as one, every byte of a
non-ASCII character as one, and whitespace other than a single space as one per run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators a chat template wraps around each message
TOOLS_OVERHEAD_TOKENS = 16  # the template's own words around the tool schemas

_LETTER_RUN = re.compile(r"[A-Za-z]+")
_DIGIT = re.compile(r"[0-9]")
_ASCII_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_WHITESPACE_TOKEN = re.compile(r"\s{2,}|[^\S ]")


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    letters = sum((len(run) + 2) // 3 for run in _LETTER_RUN.findall(text))
    digits = len(_DIGIT.findall(text))
    punctuation = len(_ASCII_PUNCT.findall(text))
    non_ascii_chars = len(_NON_ASCII.findall(text))
    non_ascii_bytes = len(text.encode("utf-8")) - (len(text) - non_ascii_chars)
    whitespace = len(_WHITESPACE_TOKEN.findall(text))
    return letters + digits + punctuation + non_ascii_bytes + whitespace


def estimate_json_tokens(value: Any) -> int:
    return estimate_tokens(json.dumps(value))


def estimate_tools_tokens(schemas: list[dict[str, Any]]) -> int:
    return TOOLS_OVERHEAD_TOKENS + estimate_json_tokens(schemas) if schemas else 0


def estimate_message_tokens(
    role: str, content: str, tool_name: str | None = None, tool_calls: Iterable[Mapping[str, Any]] = ()
) -> int:
    total = MESSAGE_OVERHEAD_TOKENS + estimate_tokens(role) + estimate_tokens(content)
    if tool_name:
        total += estimate_tokens(tool_name)
    for call in tool_calls:
        total += estimate_json_tokens(call)
    return total
