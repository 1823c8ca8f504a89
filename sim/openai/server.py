"""An OpenAI-compatible streaming server with a known speed, so the serving benchmark can be checked against it.

Each stream waits `ttft_s` (+ prompt / `prefill_tokens_per_s`) for its first token, then emits tokens at
`tokens_per_s`, `tokens_per_chunk` per server-sent event (more than one mimics speculative decoding). At most
`max_batch` streams run at once (the rest queue, which shows up as time to first token), and
`max_tokens_per_s` caps the sum of all streams' rates, shared equally. It paces on wall time, deliberately:
it stands in for hardware, and the benchmark under test measures wall time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass(frozen=True)
class StandInConfig:
    model: str = "standin-model"
    tokens_per_s: float = 50.0
    ttft_s: float = 0.1
    prefill_tokens_per_s: float | None = None
    max_batch: int | None = None
    max_tokens_per_s: float | None = None
    tokens_per_chunk: int = 1
    default_max_tokens: int = 16

    def __post_init__(self) -> None:
        for name in ("tokens_per_s", "prefill_tokens_per_s", "max_tokens_per_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.ttft_s < 0:
            raise ValueError(f"ttft_s must not be negative, got {self.ttft_s}")
        if self.tokens_per_chunk < 1 or self.default_max_tokens < 1:
            raise ValueError("tokens_per_chunk and default_max_tokens must be at least 1")
        if self.max_batch is not None and self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {self.max_batch}")


@dataclass
class StandInStats:
    requests: int = 0
    completed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    decoding: int = 0
    max_decoding: int = 0
    tokens: int = 0


class InvalidRequest(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Completion:
    chat: bool
    stream: bool
    include_usage: bool
    prompt_tokens: int
    max_tokens: int


def _count_words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_count_words(item) for item in value)
    if isinstance(value, dict):
        return _count_words(value.get("content", "")) + _count_words(value.get("text", ""))
    return 0


def parse_completion(body: Any, chat: bool, config: StandInConfig) -> Completion:
    if not isinstance(body, dict):
        raise InvalidRequest("body", f"the request body must be a JSON object, got {type(body).__name__}")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("messages", f"messages must be a non-empty list, got {messages!r:.80}")
        prompt_tokens = _count_words(messages)
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str | list):
            raise InvalidRequest("prompt", f"prompt must be a string or a list, got {prompt!r:.80}")
        prompt_tokens = _count_words(prompt)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", config.default_max_tokens))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens", f"max_tokens must be a positive integer, got {max_tokens!r}")
    options = body.get("stream_options") or {}
    return Completion(
        chat=chat,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
    )


class DecodeEngine:
    """Paces every stream; shares the aggregate cap between the streams decoding right now."""

    def __init__(self, config: StandInConfig) -> None:
        self.config = config
        self.stats = StandInStats()
        self._slots: asyncio.Semaphore | None = None
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def stream_rate_per_s(self) -> float:
        rate = self.config.tokens_per_s
        if self.config.max_tokens_per_s is not None:
            rate = min(rate, self.config.max_tokens_per_s / max(1, self.stats.decoding))
        return rate

    def _batch_slots(self) -> asyncio.Semaphore | None:
        if self.config.max_batch is not None and self._slots is None:
            self._slots = asyncio.Semaphore(self.config.max_batch)  # created in the serving loop
        return self._slots

    async def generate(self, completion: Completion) -> AsyncIterator[int]:
        """Yields the number of tokens in each chunk, at the configured pace."""
        loop = asyncio.get_running_loop()
        slots = self._batch_slots()
        if slots is not None:
            await slots.acquire()
        self.stats.decoding += 1
        self.stats.max_decoding = max(self.stats.max_decoding, self.stats.decoding)
        try:
            prefill_s = self.config.ttft_s
            if self.config.prefill_tokens_per_s:
                prefill_s += completion.prompt_tokens / self.config.prefill_tokens_per_s
            await asyncio.sleep(prefill_s)
            # Deadlines are absolute, so a late wake-up does not slow every later token.
            next_due = loop.time()
            emitted = 0
            while emitted < completion.max_tokens:
                delay_s = next_due - loop.time()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                count = min(self.config.tokens_per_chunk, completion.max_tokens - emitted)
                emitted += count
                self.stats.tokens += count
                yield count
                next_due += count / self.stream_rate_per_s()
        finally:
            self.stats.decoding -= 1
            if slots is not None:
                slots.release()


def _token_text(start: int, count: int) -> str:
    return "".join(f" w{i}" for i in range(start, start + count))


def _chunk(completion: Completion, request_id: int, model: str, text: str | None, finish: str | None) -> dict:
    if completion.chat:
        delta = {} if text is None else {"role": "assistant", "content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        kind, prefix = "chat.completion.chunk", "chatcmpl"
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
        kind, prefix = "text_completion", "cmpl"
    return {
        "id": f"{prefix}-{request_id}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }


def _usage(completion: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.max_tokens,
        "total_tokens": completion.prompt_tokens + completion.max_tokens,
    }


def create_app(config: StandInConfig | None = None) -> Starlette:
    config = config or StandInConfig()
    engine = DecodeEngine(config)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": config.model, "object": "model", "owned_by": "sim"}]})

    async def stats(request: Request) -> Response:
        return JSONResponse({"config": asdict(config), "stats": asdict(engine.stats)})

    async def events(completion: Completion, request_id: int) -> AsyncIterator[str]:
        emitted = 0
        try:
            async for count in engine.generate(completion):
                text = _token_text(emitted, count)
                emitted += count
                yield f"data: {json.dumps(_chunk(completion, request_id, config.model, text, None))}\n\n"
            yield f"data: {json.dumps(_chunk(completion, request_id, config.model, None, 'length'))}\n\n"
            if completion.include_usage:
                usage_chunk = {**_chunk(completion, request_id, config.model, None, None), "choices": []}
                yield f"data: {json.dumps({**usage_chunk, 'usage': _usage(completion)})}\n\n"
            yield "data: [DONE]\n\n"
            engine.stats.completed += 1
        finally:
            engine.stats.in_flight -= 1

    async def complete(request: Request, chat: bool) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        try:
            completion = parse_completion(body, chat, config)
        except InvalidRequest as error:
            detail = {"message": str(error), "type": "invalid_request_error", "param": error.param}
            return JSONResponse({"error": detail}, status_code=400)
        engine.stats.requests += 1
        engine.stats.in_flight += 1
        engine.stats.max_in_flight = max(engine.stats.max_in_flight, engine.stats.in_flight)
        request_id = engine.next_id()
        if completion.stream:
            return StreamingResponse(events(completion, request_id), media_type="text/event-stream")
        try:
            emitted = 0
            async for count in engine.generate(completion):
                emitted += count
            engine.stats.completed += 1
        finally:
            engine.stats.in_flight -= 1
        full = _chunk(completion, request_id, config.model, _token_text(0, emitted), "length")
        if chat:
            full["choices"][0] = {"index": 0, "message": full["choices"][0].pop("delta"), "finish_reason": "length"}
        full["object"] = "chat.completion" if chat else "text_completion"
        return JSONResponse({**full, "usage": _usage(completion)})

    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/sim/stats", stats, methods=["GET"]),
        ]
    )


def serve(config: StandInConfig, host: str = "127.0.0.1", port: int = 8100, log_level: str = "warning") -> None:
    import uvicorn

    uvicorn.run(create_app(config), host=host, port=port, log_level=log_level, access_log=False)
