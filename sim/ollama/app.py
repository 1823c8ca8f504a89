"""The stand-in's HTTP face: Ollama's chat, tags and show endpoints, plus `/_sim/*` admin routes for tests.

The behaviour is chosen per server (`--behaviour`, or `POST /_sim/behaviour`) or per request (the
`X-Sim-Behaviour` header). Every chat request is recorded with the token count of what arrived.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sim.ollama.behaviours import ALL_BEHAVIOURS, BEHAVIOURS, READINGS, Reply, follow, read_message
from sim.ollama.tokens import count_prompt, count_text

DEFAULT_MODEL = "qwen3:8b"
RECENT_FULL_REQUESTS = 50  # whole messages kept for the last few requests only: the soak sends thousands
RECEIVED_MAX = 200_000
STREAM_CHUNK_CHARS = 24
MALFORMED_BODY = '{"model": "qwen3:8b", "message": {"role": "assistant", "content": "OBSERVATION: the fl'


@dataclass
class StandInState:
    behaviour: str = "follow"
    model: str = DEFAULT_MODEL
    capabilities: list[str] = field(default_factory=lambda: ["completion", "tools"])
    slow_s: float = 30.0
    context_length: int = 40_960
    # reports prompt_eval_count times this: a model whose tokenizer counts more than expected
    token_count_factor: float = 1.0
    received: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECEIVED_MAX))
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_FULL_REQUESTS))
    in_flight: int = 0
    max_in_flight: int = 0
    seq: int = 0
    # structured readings (a request with a JSON schema as `format`), kept apart from the tool-calling requests
    readings: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECEIVED_MAX))

    def reset(self) -> None:
        self.received.clear()
        self.recent.clear()
        self.readings.clear()
        self.seq = 0
        self.max_in_flight = 0


def _error(status: int, text: str) -> JSONResponse:
    return JSONResponse({"error": text}, status_code=status)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _details() -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": "qwen3",
        "families": ["qwen3"],
        "parameter_size": "8.2B",
        "quantization_level": "Q4_K_M",
    }


def build_app(state: StandInState) -> Starlette:
    async def root(request: Request) -> Response:
        return PlainTextResponse("Ollama is running")

    async def version(request: Request) -> Response:
        return JSONResponse({"version": "0.6.3-standin"})

    async def tags(request: Request) -> Response:
        model = {
            "name": state.model,
            "model": state.model,
            "modified_at": "2026-01-01T00:00:00Z",
            "size": 5_200_000_000,
            "digest": "0" * 64,
            "details": _details(),
        }
        return JSONResponse({"models": [model]})

    async def show(request: Request) -> Response:
        body = await _json_body(request)
        if body is None:
            return _error(400, "invalid JSON body")
        name = body.get("model") or body.get("name")
        if name != state.model:
            return _error(404, f"model '{name}' not found")
        return JSONResponse(
            {
                "modelfile": f"FROM {state.model}",
                "parameters": "temperature 0.6",
                "template": "{{ .Prompt }}",
                "details": _details(),
                "model_info": {
                    "general.architecture": "qwen3",
                    "general.parameter_count": 8_190_735_360,
                    "qwen3.context_length": state.context_length,
                },
                "capabilities": state.capabilities,
                "modified_at": "2026-01-01T00:00:00Z",
            }
        )

    async def chat(request: Request) -> Response:
        body = await _json_body(request)
        if body is None:
            return _error(400, "invalid JSON body")
        if not body.get("model"):
            return _error(400, "model is required")
        if body["model"] != state.model:
            return _error(404, f"model '{body['model']}' not found, try pulling it first")
        messages = list(body.get("messages") or [])
        tools = list(body.get("tools") or [])
        behaviour = request.headers.get("x-sim-behaviour") or state.behaviour
        prompt_tokens = round(count_prompt(messages, tools) * state.token_count_factor)
        reading = isinstance(body.get("format"), dict)
        if reading:
            state.readings.append({"messages": messages, "format": body["format"]})
        else:
            _record(state, body, behaviour, prompt_tokens, messages, tools)
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if behaviour == "down":
                return _error(500, "model runner has unexpectedly stopped (stand-in: down)")
            if behaviour == "slow":
                await asyncio.sleep(state.slow_s)
            if behaviour == "malformed_json":
                return Response(MALFORMED_BODY, media_type="application/json")
            if reading:  # a structured reading: read_message's, unless the behaviour is a model that cannot read
                reply = READINGS.get(behaviour, read_message)(messages)
            else:
                reply = BEHAVIOURS.get(behaviour, follow)(messages)
        finally:
            state.in_flight -= 1
        if body.get("stream", True):
            return StreamingResponse(_stream(state.model, reply, prompt_tokens), media_type="application/x-ndjson")
        return JSONResponse(_final(state.model, reply, prompt_tokens, with_message=True))

    async def received(request: Request) -> Response:
        full = request.query_params.get("full") == "1"
        items = list(state.recent) if full else list(state.received)
        return JSONResponse(
            {
                "requests": items,
                "max_in_flight": state.max_in_flight,
                "total": state.seq,
                "readings": list(state.readings),
            }
        )

    async def set_behaviour(request: Request) -> Response:
        body = await _json_body(request)
        if body is None or body.get("behaviour") not in ALL_BEHAVIOURS:
            return _error(400, f"behaviour must be one of {', '.join(ALL_BEHAVIOURS)}")
        state.behaviour = body["behaviour"]
        if "slow_s" in body:
            state.slow_s = float(body["slow_s"])
        if "capabilities" in body:
            state.capabilities = list(body["capabilities"])
        if "token_count_factor" in body:
            state.token_count_factor = float(body["token_count_factor"])
        return JSONResponse({"behaviour": state.behaviour, "slow_s": state.slow_s})

    async def reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"reset": True})

    return Starlette(
        routes=[
            Route("/", root),
            Route("/api/version", version),
            Route("/api/tags", tags),
            Route("/api/show", show, methods=["POST"]),
            Route("/api/chat", chat, methods=["POST"]),
            Route("/_sim/received", received),
            Route("/_sim/behaviour", set_behaviour, methods=["POST"]),
            Route("/_sim/reset", reset, methods=["POST"]),
        ]
    )


async def _json_body(request: Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _record(
    state: StandInState,
    body: dict[str, Any],
    behaviour: str,
    prompt_tokens: int,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
) -> None:
    state.seq += 1
    summary = {
        "seq": state.seq,
        "behaviour": behaviour,
        "stream": bool(body.get("stream", True)),
        "prompt_tokens": prompt_tokens,
        "message_count": len(messages),
        "roles": [str(m.get("role")) for m in messages],
        "tools": [str((t.get("function") or {}).get("name")) for t in tools],
        "num_ctx": (body.get("options") or {}).get("num_ctx"),
        "num_predict": (body.get("options") or {}).get("num_predict"),
    }
    state.received.append(summary)
    state.recent.append({**summary, "messages": messages})


def _final(model: str, reply: Reply, prompt_tokens: int, *, with_message: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content if with_message else ""}
    if with_message and reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    eval_count = count_text(reply.content) + sum(count_text(json.dumps(c)) for c in reply.tool_calls)
    return {
        "model": model,
        "created_at": _now(),
        "message": message,
        "done": True,
        "done_reason": "stop",
        "total_duration": 1_000_000,
        "load_duration": 1_000,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": 500_000,
        "eval_count": eval_count,
        "eval_duration": 500_000,
    }


async def _stream(model: str, reply: Reply, prompt_tokens: int) -> AsyncIterator[bytes]:
    """NDJSON as Ollama streams it: content in pieces, tool calls in one chunk, then the done line with counts."""
    for start in range(0, len(reply.content), STREAM_CHUNK_CHARS):
        piece = reply.content[start : start + STREAM_CHUNK_CHARS]
        chunk = {
            "model": model,
            "created_at": _now(),
            "message": {"role": "assistant", "content": piece},
            "done": False,
        }
        yield (json.dumps(chunk) + "\n").encode()
    if reply.tool_calls:
        message = {"role": "assistant", "content": "", "tool_calls": reply.tool_calls}
        yield (json.dumps({"model": model, "created_at": _now(), "message": message, "done": False}) + "\n").encode()
    yield (json.dumps(_final(model, reply, prompt_tokens, with_message=False)) + "\n").encode()
