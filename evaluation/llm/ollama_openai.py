"""Pure translation between Ollama's chat API and the OpenAI chat API that llama-server speaks.

Small instruction models (Qwen2.5-Coder 0.5B/1.5B) answer a tool offer with a bare or ```json-fenced object
`{"name": ..., "arguments": {...}}` instead of the template's tool-call tags, so llama-server reports plain
content. Older Ollama releases recognised such an object as a tool call; so does this adapter, but only for a
name among the tools offered in that request (anything else stays text, for the caller to judge).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Ollama option -> OpenAI (or llama-server extension) parameter of the same meaning
OPTION_PARAMETERS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "repeat_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "num_predict": "max_tokens",
}
_TOOL_CALL_TAG = re.compile(r"</?tool_call>")
_FENCE = re.compile(r"^```(?:json|JSON)?\s*\n?(.*?)\n?```$", re.DOTALL)


class RequestError(ValueError):
    """A chat request Ollama itself would refuse (400), naming the field."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ChatResult:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    done_reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_ms: float | None = None
    predicted_ms: float | None = None


def offered_tool_names(tools: list[dict[str, Any]]) -> frozenset[str]:
    names = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return frozenset(names)


def _options(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise RequestError(f"options must be an object, got {type(options).__name__}")
    mapped: dict[str, Any] = {}
    for key, value in options.items():
        if key == "num_predict" and isinstance(value, int) and value < 0:
            continue  # Ollama's -1 is "until done": OpenAI's default
        if key in OPTION_PARAMETERS:
            mapped[OPTION_PARAMETERS[key]] = value
    return mapped


def _response_format(fmt: Any) -> dict[str, Any] | None:
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": fmt}}
    raise RequestError(f'format must be "json" or a JSON schema object, got {fmt!r:.80}')


def _arguments_object(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def to_openai_messages(messages: Any) -> list[dict[str, Any]]:
    """Ollama messages to OpenAI ones: tool calls get ids, and each tool result answers the next unanswered id."""
    if not isinstance(messages, list):
        raise RequestError(f"messages must be a list, got {type(messages).__name__}")
    converted: list[dict[str, Any]] = []
    unanswered: list[tuple[str, str]] = []  # (id, tool name), oldest first
    serial = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant", "tool"):
            raise RequestError(f"messages[{index}] needs a role of system, user, assistant or tool")
        role = message["role"]
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise RequestError(f"messages[{index}].content must be a string")
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = (call or {}).get("function") or {}
                serial += 1
                call_id = f"call_{serial}"
                name = str(function.get("name", ""))
                unanswered.append((call_id, name))
                arguments = json.dumps(_arguments_object(function.get("arguments")))
                calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
            converted.append({"role": "assistant", "content": content, "tool_calls": calls})
        elif role == "tool":
            result_of = message.get("tool_name") or message.get("name")
            match = next(
                (i for i, (_, n) in enumerate(unanswered) if result_of and n == result_of), 0 if unanswered else None
            )
            call_id = unanswered.pop(match)[0] if match is not None else f"call_orphan_{index}"
            converted.append({"role": "tool", "content": content, "tool_call_id": call_id})
        else:
            converted.append({"role": role, "content": content})
    return converted


def to_openai_request(body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    """An Ollama `/api/chat` body as an OpenAI `/v1/chat/completions` body (streaming or not, as asked)."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise RequestError("tools must be a list")
    request: dict[str, Any] = {
        "model": upstream_model,
        "messages": to_openai_messages(body.get("messages") or []),
        "stream": bool(body.get("stream", True)),
        # llama-server keeps the evaluated prefix (system prompt, tools) for the next request with the same start
        "cache_prompt": True,
        **_options(body.get("options")),
    }
    if tools:
        request["tools"] = tools
    if request["stream"]:
        request["stream_options"] = {"include_usage": True}
    response_format = _response_format(body.get("format"))
    if response_format is not None:
        request["response_format"] = response_format
    return request


def _json_values(text: str, *, cut: bool = False) -> list[Any] | None:
    """The JSON values `text` consists of (one, a list, or several in a row), or None if it is anything else.

    After complete values, text that is not JSON is left out; so is an unfinished value when `cut` (the text
    stopped at the token limit: a 0.5B model wrote the same calls over and over until the limit)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position = 0
    while position < len(text):
        while position < len(text) and text[position] in " \t\r\n,;":
            position += 1
        if position >= len(text):
            break
        try:
            value, position = decoder.raw_decode(text, position)
        except ValueError:
            prose = text[position] not in "{["
            if values and (cut or prose) and not (prose and '"name"' in text[position:]):
                break  # a call cut by the limit, or prose after the calls (a 0.5B model echoed the prompt)
            return None
        values.append(value)
    return values or None


_CLOSER = {"}": "{", "]": "["}
_OPENER = {"{": "}", "[": "]"}


@dataclass(frozen=True)
class _Brackets:
    kept: str  # the text less closing brackets that close nothing open
    still_open: str  # the brackets left open at the end, innermost last
    in_string: bool
    escaped: bool


def _brackets(text: str) -> _Brackets:
    """One pass over JSON-like text, outside strings: which closers close nothing, which openers stay open."""
    kept: list[str] = []
    opened: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _OPENER:
            opened.append(char)
        elif char in _CLOSER:
            if not opened or opened[-1] != _CLOSER[char]:
                continue
            opened.pop()
        kept.append(char)
    return _Brackets("".join(kept), "".join(opened), in_string, escaped)


def without_stray_closers(text: str) -> str:
    """`text` less any closing bracket that closes nothing open (outside strings): a 0.5B model wrote
    `{"name": "finish", "arguments": {...}]}`."""
    return _brackets(text).kept


def closed_at_cut(text: str) -> str:
    """A single call cut by the token limit inside a string value, closed where it stopped (a 0.5B model's
    reply to the operator ran on until the limit). Cut anywhere else it is left as it is, and stays text."""
    state = _brackets(text)
    if not state.in_string:
        return text
    body = text[:-1] if state.escaped else text
    return body + '"' + "".join(_OPENER[b] for b in reversed(state.still_open))


def recognise_tool_calls(content: str, offered: frozenset[str], *, cut: bool = False) -> list[ToolCall]:
    """Tool calls written as JSON text: `{"name": <offered tool>, "arguments": {...}}`, bare or ```json-fenced.

    Every object must name an offered tool, or none counts: a half-recognised answer would run some calls and
    lose the rest of what the model meant."""
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    # the template's own tags, when the server's parser let them through (an unclosed or doubled tag)
    text = _TOOL_CALL_TAG.sub("", text).strip()
    if not offered or not text.startswith(("{", "[")):
        return []
    values = _json_values(text, cut=cut) or _json_values(without_stray_closers(text), cut=cut)
    if values is None and cut:
        values = _json_values(closed_at_cut(text))
    if values is None:
        return []
    objects: list[Any] = []
    for value in values:
        objects.extend(value if isinstance(value, list) else [value])
    calls = []
    for item in objects:
        if not isinstance(item, dict) or item.get("name") not in offered:
            return []
        arguments = item.get("arguments", item.get("parameters", {}))
        if isinstance(arguments, str):
            arguments = _arguments_object(arguments) if arguments.strip() else {}
        if not isinstance(arguments, dict):
            return []
        calls.append(ToolCall(name=item["name"], arguments=arguments))
    return calls


def might_be_tool_call(prefix: str) -> bool:
    """While streaming: could content starting like this still turn out to be a JSON tool call?"""
    text = prefix.lstrip()
    if not text:
        return True
    return (
        text.startswith(("{", "[", "```"))
        or "```".startswith(text[:3])
        or "<tool_call>".startswith(text[:11])
        or text.startswith("<tool_call>")
    )


def _upstream_tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = (call or {}).get("function") or {}
        if function.get("name"):
            calls.append(ToolCall(str(function["name"]), _arguments_object(function.get("arguments"))))
    return calls


def _done_reason(finish_reason: Any) -> str:
    return "length" if finish_reason == "length" else "stop"


def from_openai_response(response: dict[str, Any], offered: frozenset[str]) -> ChatResult:
    """A non-streamed OpenAI completion as Ollama's message, with JSON-text tool calls recognised."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ValueError("the upstream completion has no choices")
    message = choices[0].get("message") or {}
    content = message.get("content") or ""
    cut = choices[0].get("finish_reason") == "length"
    calls = _upstream_tool_calls(message) or recognise_tool_calls(content, offered, cut=cut)
    usage = response.get("usage") or {}
    timings = response.get("timings") or {}
    return ChatResult(
        content="" if calls and not message.get("tool_calls") else content,
        tool_calls=calls,
        done_reason=_done_reason(choices[0].get("finish_reason")),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        prompt_ms=timings.get("prompt_ms"),
        predicted_ms=timings.get("predicted_ms"),
    )


def ollama_message(result: ChatResult, *, with_content: bool = True) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.content if with_content else ""}
    if result.tool_calls:
        message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in result.tool_calls]
    return message


def _ns(ms: float | None) -> int:
    return int((ms or 0.0) * 1_000_000)


def done_fields(result: ChatResult, total_ns: int) -> dict[str, Any]:
    """The counts and durations Ollama puts on its final chunk; token counts are llama-server's own."""
    fields: dict[str, Any] = {
        "done": True,
        "done_reason": result.done_reason,
        "total_duration": total_ns,
        "load_duration": 0,
        "prompt_eval_duration": _ns(result.prompt_ms),
        "eval_duration": _ns(result.predicted_ms),
    }
    if result.prompt_tokens is not None:
        fields["prompt_eval_count"] = result.prompt_tokens
    if result.completion_tokens is not None:
        fields["eval_count"] = result.completion_tokens
    return fields


@dataclass
class StreamAssembler:
    """Folds OpenAI stream chunks into what Ollama streams: text as it comes, unless it may be a JSON tool call,
    which is held until the end and then sent as one tool-call chunk (or, if it was not one, as text)."""

    offered: frozenset[str]
    held: str = ""
    holding: bool = True
    upstream_calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: Any = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)

    def feed(self, chunk: dict[str, Any]) -> str:
        """Text to send now (possibly empty)."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("timings"):
            self.timings = chunk["timings"]
        out = ""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            for call in delta.get("tool_calls") or []:
                slot = self.upstream_calls.setdefault(int(call.get("index", 0)), {"name": "", "arguments": ""})
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            piece = delta.get("content") or ""
            if not piece:
                continue
            if self.holding:
                self.held += piece
                if not (self.offered and might_be_tool_call(self.held)):
                    self.holding = False
                    out += self.held
                    self.held = ""
            else:
                out += piece
        return out

    def finish(self) -> ChatResult:
        """The last part: held text resolved into tool calls or released as content, and the counts."""
        calls = [ToolCall(s["name"], _arguments_object(s["arguments"])) for _, s in sorted(self.upstream_calls.items())]
        content = self.held
        if not calls and content:
            calls = recognise_tool_calls(content, self.offered, cut=self.finish_reason == "length")
            if calls:
                content = ""
        return ChatResult(
            content=content,
            tool_calls=calls,
            done_reason=_done_reason(self.finish_reason),
            prompt_tokens=self.usage.get("prompt_tokens"),
            completion_tokens=self.usage.get("completion_tokens"),
            prompt_ms=self.timings.get("prompt_ms"),
            predicted_ms=self.timings.get("predicted_ms"),
        )
