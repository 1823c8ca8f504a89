"""The Ollama adapter over real HTTP: the ollama client in front, a scripted OpenAI server behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ollama import AsyncClient, ResponseError

from evaluation.llm.adapter import ModelCard, build_adapter
from tests.llm.fake_openai import Script, build_app, serving

MODEL = "qwen2.5-coder:0.5b"
LAUNCH = {
    "type": "function",
    "function": {
        "name": "launch_instances",
        "description": "rent machines",
        "parameters": {
            "type": "object",
            "required": ["count"],
            "properties": {"count": {"type": "integer"}},
        },
    },
}
ARGS = '{"count": 2, "gpu_models": [], "launch_priority": "normal", "reason": "sustained_demand"}'


@dataclass
class Served:
    script: Script
    client: AsyncClient
    url: str


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    script = Script()
    async with serving(build_app(script)) as upstream:  # noqa: SIM117 (the adapter needs the upstream's URL)
        async with serving(build_adapter(upstream, ModelCard(name=MODEL, context_length=16384))) as url:
            client = AsyncClient(host=url, timeout=10.0)
            yield Served(script, client, url)
            await client._client.aclose()


async def chat(served: Served, *, stream: bool, tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> Any:
    messages = [{"role": "user", "content": "the fleet is short of capacity"}]
    if not stream:
        return await served.client.chat(model=MODEL, messages=messages, tools=tools, stream=False, **kwargs)
    chunks = [c async for c in await served.client.chat(model=MODEL, messages=messages, tools=tools, stream=True)]
    return chunks


@pytest.mark.parametrize("stream", [False, True])
async def test_calls_repeated_until_the_token_limit_keep_the_complete_ones(served: Served, stream: bool) -> None:
    call = f'{{"name": "launch_instances", "arguments": {ARGS}}}'
    served.script.replies = [f"{call}\n{call}\n{call[:25]}"]
    served.script.finish_reason = "length"
    response = await chat(served, stream=stream, tools=[LAUNCH])

    last = response[-1] if stream else response
    calls = [c for chunk in (response if stream else [response]) for c in chunk.message.tool_calls or []]
    assert [c.function.name for c in calls] == ["launch_instances", "launch_instances"]
    assert last.done_reason == "length"


async def test_a_bare_json_object_naming_an_offered_tool_becomes_a_tool_call(served: Served) -> None:
    served.script.replies = [f'{{"name": "launch_instances", "arguments": {ARGS}}}']
    response = await chat(served, stream=False, tools=[LAUNCH])

    (call,) = response.message.tool_calls
    assert call.function.name == "launch_instances"
    assert call.function.arguments == {
        "count": 2,
        "gpu_models": [],
        "launch_priority": "normal",
        "reason": "sustained_demand",
    }
    assert response.message.content == ""
    assert response.prompt_eval_count == 321 and response.eval_count is not None and response.done


async def test_a_fenced_tool_call_streams_as_one_tool_call_chunk(served: Served) -> None:
    served.script.replies = [f'```json\n{{"name": "launch_instances", "arguments": {ARGS}}}\n```']
    chunks = await chat(served, stream=True, tools=[LAUNCH])

    calls = [call for chunk in chunks for call in (chunk.message.tool_calls or [])]
    assert [(c.function.name, c.function.arguments["count"]) for c in calls] == [("launch_instances", 2)]
    assert "".join(chunk.message.content or "" for chunk in chunks) == ""
    assert chunks[-1].done and chunks[-1].prompt_eval_count == 321


async def test_json_naming_a_tool_that_was_not_offered_stays_text(served: Served) -> None:
    text = '{"name": "scale_fleet", "arguments": {"target": 12}}'
    served.script.replies = [text, text]
    response = await chat(served, stream=False, tools=[LAUNCH])
    assert response.message.tool_calls is None and response.message.content == text

    chunks = await chat(served, stream=True, tools=[LAUNCH])
    assert "".join(c.message.content or "" for c in chunks) == text
    assert not any(c.message.tool_calls for c in chunks)


async def test_plain_text_streams_in_pieces_as_it_comes(served: Served) -> None:
    answer = "OBSERVATION: 2 producing\nASSESSMENT: short\nDECISION: launch 2"
    served.script.replies = [answer]
    chunks = await chat(served, stream=True, tools=[LAUNCH])

    text_chunks = [c for c in chunks if c.message.content]
    assert len(text_chunks) > 3 and "".join(c.message.content for c in text_chunks) == answer
    assert chunks[-1].done and chunks[-1].done_reason == "stop" and chunks[-1].eval_count == len(answer) // 4


async def test_tool_calls_the_server_parsed_itself_pass_through(served: Served) -> None:
    served.script.native_tool_calls = [
        {"id": "c1", "type": "function", "function": {"name": "launch_instances", "arguments": ARGS}}
    ]
    response = await chat(served, stream=False, tools=[LAUNCH])
    assert response.message.tool_calls[0].function.arguments["reason"] == "sustained_demand"


async def test_the_request_is_mapped_to_openai_parameters(served: Served) -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "observe"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "get_offers", "arguments": {}}},
                {"function": {"name": "launch_instances", "arguments": {"count": 1}}},
            ],
        },
        {"role": "tool", "content": "launched", "tool_name": "launch_instances"},
        {"role": "tool", "content": "3 offers", "tool_name": "get_offers"},
    ]
    await served.client.chat(
        model=MODEL,
        messages=messages,
        tools=[LAUNCH],
        stream=False,
        format="json",
        options={"temperature": 0.2, "num_ctx": 14000, "num_predict": 256, "top_k": 20, "seed": 7},
    )

    sent = served.script.received[0]
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 256 and sent["top_k"] == 20 and sent["seed"] == 7
    assert "num_ctx" not in sent and sent["stream"] is False and sent["cache_prompt"] is True
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["tools"][0]["function"]["name"] == "launch_instances"
    assistant, first_result, second_result = sent["messages"][2:]
    ids = {call["function"]["name"]: call["id"] for call in assistant["tool_calls"]}
    assert assistant["tool_calls"][1]["function"]["arguments"] == '{"count": 1}'
    # each result answers the call of the same tool, whatever the order
    assert first_result == {"role": "tool", "content": "launched", "tool_call_id": ids["launch_instances"]}
    assert second_result["tool_call_id"] == ids["get_offers"]


async def test_a_streamed_request_asks_for_usage(served: Served) -> None:
    await chat(served, stream=True)
    assert served.script.received[0]["stream_options"] == {"include_usage": True}


async def test_tags_and_show_describe_the_model_with_tools(served: Served) -> None:
    listed = await served.client.list()
    assert [m.model for m in listed.models] == [MODEL]
    shown = await served.client.show(MODEL)
    assert "tools" in (shown.capabilities or [])
    assert shown.modelinfo is not None and shown.modelinfo["qwen2.context_length"] == 16384


async def test_an_unknown_model_is_a_404_as_in_ollama(served: Served) -> None:
    with pytest.raises(ResponseError) as raised:
        await served.client.chat(model="llama3:70b", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert raised.value.status_code == 404 and "not found" in str(raised.value.error)


async def test_a_malformed_request_is_refused_naming_the_field(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        response = await http.post("/api/chat", json={"model": MODEL, "messages": [{"role": "robot"}]})
        bad_format = await http.post("/api/chat", json={"model": MODEL, "messages": [], "format": 3})
    assert response.status_code == 400 and "messages[0]" in response.json()["error"]
    assert bad_format.status_code == 400 and "format" in bad_format.json()["error"]


async def test_an_upstream_failure_is_a_502_with_the_reason(served: Served) -> None:
    served.script.fail_status = 503
    with pytest.raises(ResponseError) as raised:
        await chat(served, stream=False)
    assert raised.value.status_code == 502 and "HTTP 503" in str(raised.value.error)


async def test_an_unreachable_upstream_is_a_502() -> None:
    from shared.processes import free_port

    async with serving(build_adapter(f"http://127.0.0.1:{free_port()}", ModelCard(name=MODEL))) as url:
        client = AsyncClient(host=url, timeout=10.0)
        with pytest.raises(ResponseError) as raised:
            await client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=False)
        await client._client.aclose()
    assert raised.value.status_code == 502 and "unreachable" in str(raised.value.error)
