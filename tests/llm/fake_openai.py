"""A small scripted OpenAI chat server over real HTTP, shaped like llama-server's answers: each request gets the
next scripted content (streamed as server-sent events in small pieces when asked), usage and timings, and every
request body is recorded for the tests to read."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shared.processes import free_port

PIECE_CHARS = 7


@dataclass
class Script:
    replies: list[str] = field(default_factory=list)
    native_tool_calls: list[dict[str, Any]] = field(default_factory=list)  # as llama-server reports parsed calls
    received: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 321
    fail_status: int | None = None
    finish_reason: str = "stop"  # "length": the reply stopped at the token limit

    def next_reply(self) -> str:
        return self.replies.pop(0) if self.replies else "OBSERVATION: x\nASSESSMENT: y\nDECISION: hold"


def _usage(script: Script, content: str) -> dict[str, int]:
    completion = max(1, len(content) // 4)
    return {"prompt_tokens": script.prompt_tokens, "completion_tokens": completion, "total_tokens": completion + 1}


def build_app(script: Script) -> Starlette:
    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        script.received.append(body)
        if script.fail_status is not None:
            return JSONResponse({"error": {"message": "scripted failure"}}, status_code=script.fail_status)
        content = script.next_reply()
        timings = {"prompt_ms": 250.0, "predicted_ms": 500.0}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if script.native_tool_calls:
                message = {"role": "assistant", "content": None, "tool_calls": script.native_tool_calls}
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": message, "finish_reason": script.finish_reason}],
                    "usage": _usage(script, content),
                    "timings": timings,
                }
            )

        async def events() -> AsyncIterator[str]:
            for start in range(0, len(content), PIECE_CHARS):
                delta = {"content": content[start : start + PIECE_CHARS]}
                chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            last = {"choices": [{"index": 0, "delta": {}, "finish_reason": script.finish_reason}]}
            yield f"data: {json.dumps(last)}\n\n"
            usage = {"choices": [], "usage": _usage(script, content), "timings": timings}
            yield f"data: {json.dumps(usage)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


class QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """`app` on a free port for the duration; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = QuietServer(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
