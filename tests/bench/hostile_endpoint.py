"""An OpenAI-compatible endpoint that answers what a test scripts, byte for byte, over real HTTP/1.1: the
misbehaving host a rented machine may run, which the faithful stand-in (sim/openai) never is. It serves from its
own thread and event loop, so async tests and CLI runs (which start a loop of their own) reach it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

# The completion request as the endpoint received it, and the connection to answer on (closed afterwards).
CompletionAnswer = Callable[[dict[str, Any], asyncio.StreamWriter], Awaitable[None]]

MODEL = "served-model"
MODEL_LIST = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()


def head(status: int = 200, content_type: str = "text/event-stream", length: int | None = None) -> bytes:
    size = f"content-length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n{size}connection: close\r\n\r\n".encode()


def event(payload: str | dict[str, Any]) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


def content_chunk(text: str, model: str = MODEL) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"content": text}}]}


def usage_chunk(completion_tokens: object, model: str = MODEL) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [],
        "usage": {"completion_tokens": completion_tokens},
    }


def faithful_events(request: dict[str, Any], tokens_per_chunk: int = 1) -> bytes:
    """What vLLM streams: every token asked for (`tokens_per_chunk` to a chunk), the usage, then [DONE]."""
    tokens, model = request["max_tokens"], request["model"]
    starts = range(0, tokens, tokens_per_chunk)
    words = [" ".join(f"w{i}" for i in range(start, min(start + tokens_per_chunk, tokens))) for start in starts]
    return b"".join([*(event(content_chunk(word, model)) for word in words), event(usage_chunk(tokens, model))])


async def faithful(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    writer.write(head() + faithful_events(request) + event("[DONE]"))


def streaming(*payloads: str | dict[str, Any]) -> CompletionAnswer:
    """The same scripted events for every request, then [DONE]."""

    async def answer(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head() + b"".join(event(payload) for payload in payloads) + event("[DONE]"))

    return answer


def taking_turns(*answers: CompletionAnswer) -> CompletionAnswer:
    """Request n gets answers[n % len(answers)]: a bad answer among good ones, on one endpoint."""
    served = 0

    async def answer(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        nonlocal served
        chosen, served = answers[served % len(answers)], served + 1
        await chosen(request, writer)

    return answer


async def dripping(writer: asyncio.StreamWriter, piece: bytes, every_s: float) -> None:
    """`piece` again and again, each well within any per-read timeout, until the client hangs up."""
    while not writer.is_closing():
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(every_s)


class HostileEndpoint:
    def __init__(self, completion: CompletionAnswer, model_list: bytes) -> None:
        self.completion = completion
        self.model_list = model_list
        self.requests: list[dict[str, Any]] = []
        self.accepted_encodings: list[str] = []  # each request's accept-encoding header, as sent
        self.url = ""
        self.answering: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def hang_up(self) -> None:
        """Drop every connection and let each answer end on it: a task cancelled instead is logged as an error by
        asyncio's stream server (Python 3.11)."""
        for writer in self.answering.values():
            writer.transport.abort()
        if self.answering:
            await asyncio.wait(set(self.answering), timeout=5)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.answering[task] = writer
        try:
            request_head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            path = request_head[0].split()[1]
            headers = {line.split(":", 1)[0].lower(): line.split(":", 1)[1] for line in request_head[1:] if ":" in line}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.accepted_encodings.append(headers.get("accept-encoding", "").strip())
            if path.endswith("/v1/models"):
                writer.write(head(200, "application/json", len(self.model_list)) + self.model_list)
            else:
                self.requests.append(json.loads(body))
                await self.completion(self.requests[-1], writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: what a test of deadlines and caps wants it to do
        finally:
            writer.close()
            del self.answering[task]


@contextlib.contextmanager
def hostile_endpoint(
    completion: CompletionAnswer = faithful, model_list: bytes = MODEL_LIST
) -> Iterator[HostileEndpoint]:
    endpoint = HostileEndpoint(completion, model_list)
    ready = threading.Event()
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def serve() -> None:
        server = await asyncio.start_server(endpoint.handle, "127.0.0.1", 0)
        endpoint.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        stop = asyncio.Event()
        running.append((asyncio.get_running_loop(), stop))
        ready.set()
        await stop.wait()
        server.close()
        await endpoint.hang_up()  # an endless stream ends only when its connection does

    def run() -> None:
        asyncio.run(serve())

    thread = threading.Thread(target=run, name="hostile-endpoint", daemon=True)
    thread.start()
    assert ready.wait(10), "the hostile endpoint did not start"
    try:
        yield endpoint
    finally:
        loop, stop = running[0]
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
