"""The serving benchmark's client: streams OpenAI-compatible completions at each concurrency level over httpx.

At level c, c workers take the level's planned requests in turn (so c requests are in flight until the
last wave), each timing its first token and every content chunk from the server-sent events. The server is a
stranger's: what it sends is bounded and checked (serving_protocol.py), a bad answer fails only its own request,
and deadlines bound each request and the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from services.bench.serving_protocol import (
    MODEL_ID_MAX_CHARS,
    MODEL_LIST_MAX_BYTES,
    SSE_LINE_MAX_BYTES,
    MalformedAnswer,
    StreamChunk,
    parse_chunk,
    parse_model_list,
)
from services.bench.serving_stats import (
    LevelSummary,
    PlannedRequest,
    RequestTiming,
    ServingRun,
    ServingWorkload,
    compare_runs,
    counted_output_tokens,
    more_chunks_than_asked,
    output_shortfall,
    plan_requests,
    summarize_level,
    without_credentials,
)
from shared.untrusted_text import printable

Timer = Callable[[], float]
ERROR_BODY_MAX_CHARS = 300
# An error body is read no further than the characters kept could take (UTF-8: at most 4 bytes each).
ERROR_BODY_MAX_BYTES = 4 * ERROR_BODY_MAX_CHARS


class ModelDiscoveryFailed(ValueError):
    """/v1/models named no model the sweep can ask for: the sweep cannot start (bad input, so a ValueError)."""


def api_base(url: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/v1` all mean the same server."""
    return url.rstrip("/").removesuffix("/v1")


def endpoint(url: str, api: str) -> str:
    return f"{api_base(url)}/v1/{'chat/completions' if api == 'chat' else 'completions'}"


def request_body(workload: ServingWorkload, model: str, planned: PlannedRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": planned.output_tokens,
        "temperature": 0.0,
        "stream": True,
        # The final chunk then carries the exact token count (a chunk can hold several tokens).
        "stream_options": {"include_usage": True},
    }
    if workload.ignore_eos:
        body["ignore_eos"] = True
    if workload.api == "chat":
        body["messages"] = [{"role": "user", "content": planned.prompt}]
    else:
        body["prompt"] = planned.prompt
    return body


def uncompressed(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as the network delivers it. The client asks for no compression (`build_client`), and a body
    compressed anyway is refused unread: httpx inflates each network read whole, so 64 KB of a gzip bomb became 64
    MB at once, whatever cap the reader kept."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise MalformedAnswer(f"a compressed answer (content-encoding {printable(encoding[:40], single_line=True)})")
    return response.aiter_raw()


async def capped_body(response: httpx.Response, max_bytes: int) -> bytes:
    """The body, read no further than max_bytes + 1: the extra byte tells a longer body from one that fits."""
    body = bytearray()
    async for piece in uncompressed(response):
        body += piece
        if len(body) > max_bytes:
            break
    return bytes(body[: max_bytes + 1])


def refuse_long_line(raw: bytes) -> None:
    if len(raw) > SSE_LINE_MAX_BYTES:
        raise MalformedAnswer(f"a stream line longer than {SSE_LINE_MAX_BYTES} bytes")


# SSE's line ends: CRLF, LF or a bare CR (the spec allows all three; a bare CR was read as part of the line, so a
# server ending its lines so had every event run into the next and failed every request)
_LINE_END = re.compile(rb"\r\n|\r|\n")


async def bounded_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The body's lines, each refused once it outgrows SSE_LINE_MAX_BYTES, before the rest of it is buffered."""
    pending = b""
    async for piece in uncompressed(response):
        pending += piece
        # a CR that ends this read may be the first half of a CRLF split between two reads: it waits for the next
        held = 1 if pending.endswith(b"\r") else 0
        *lines, rest = _LINE_END.split(pending[: len(pending) - held])
        pending = rest + pending[len(pending) - held :]
        for line in lines:
            refuse_long_line(line)
            yield line.decode(errors="replace")
        refuse_long_line(pending)
    if pending:
        yield pending.removesuffix(b"\r").decode(errors="replace")


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The data of each server-sent event, up to `[DONE]`: an event's `data:` lines joined by newlines, dispatched
    at the blank line that ends it (as the SSE spec and OpenAI's own client read a stream); an event the stream
    ends in without its blank line is read too."""
    data: list[str] = []
    data_chars = 0  # an event of many data lines is capped as one line is
    async for line in bounded_lines(response):
        if line.startswith("data:"):
            data.append(line[len("data:") :].removeprefix(" "))
            data_chars += len(data[-1])
            if data_chars > SSE_LINE_MAX_BYTES:
                raise MalformedAnswer(f"an event's data longer than {SSE_LINE_MAX_BYTES} bytes")
        elif not line and data:  # the blank line that ends an event
            payload, data, data_chars = _joined(data), [], 0
            if payload == "[DONE]":
                return
            yield payload
        # other lines: `: keep-alive` comments, `event:` and `id:` fields
    if data and (payload := _joined(data)) != "[DONE]":
        yield payload


def _joined(data: list[str]) -> str:
    return "\n".join(data).strip()


@dataclass
class StreamTally:
    """What one request's stream has delivered so far, checked chunk by chunk."""

    asked_model: str
    max_tokens: int
    chunk_times_s: list[float] = field(default_factory=list)
    text_bytes: int = 0
    claimed_tokens: int | None = None

    def add(self, chunk: StreamChunk, timer: Timer) -> None:
        # A host may serve a smaller model than the one it rents out: its speed says nothing about the asked one.
        if chunk.model is not None and chunk.model != self.asked_model:
            raise MalformedAnswer(
                f"answered as model {chunk.model[:MODEL_ID_MAX_CHARS]!r}, asked for {self.asked_model!r}"
            )
        text = chunk.text()
        if text:
            self.chunk_times_s.append(timer())
            self.text_bytes += len(text.encode())
            too_many = more_chunks_than_asked(len(self.chunk_times_s), self.max_tokens)
            if too_many is not None:
                raise MalformedAnswer(too_many)
        if chunk.usage is not None and chunk.usage.completion_tokens is not None:
            self.claimed_tokens = chunk.usage.completion_tokens

    def finished(self, start_s: float, end_s: float, ignore_eos: bool) -> RequestTiming:
        if not self.chunk_times_s:
            return RequestTiming(start_s, end_s, error="stream ended without a token")
        chunks = len(self.chunk_times_s)
        tokens = counted_output_tokens(self.claimed_tokens, chunks, self.text_bytes, self.max_tokens)
        shortfall = output_shortfall(tokens, self.max_tokens, ignore_eos)
        if shortfall is not None:
            return RequestTiming(start_s, end_s, error=shortfall)
        return RequestTiming(
            start_s=start_s,
            end_s=end_s,
            first_token_s=self.chunk_times_s[0],
            chunk_times_s=tuple(self.chunk_times_s),
            output_tokens=tokens,
        )


async def _stream(
    client: httpx.AsyncClient,
    url: str,
    workload: ServingWorkload,
    model: str,
    planned: PlannedRequest,
    timer: Timer,
    start_s: float,
) -> RequestTiming:
    tally = StreamTally(asked_model=model, max_tokens=planned.output_tokens)
    async with client.stream("POST", url, json=request_body(workload, model, planned)) as response:
        if response.status_code != 200:
            try:
                text = (await capped_body(response, ERROR_BODY_MAX_BYTES)).decode(errors="replace")
            except MalformedAnswer as unread:
                text = f"({unread}, not read)"
            return RequestTiming(start_s, timer(), error=f"HTTP {response.status_code}: {text[:ERROR_BODY_MAX_CHARS]}")
        async for payload in sse_data(response):
            chunk = parse_chunk(payload)
            stream_error = chunk.error_text()
            if stream_error is not None:
                return RequestTiming(start_s, timer(), error=f"stream error: {stream_error}")
            tally.add(chunk, timer)
    return tally.finished(start_s, timer(), workload.ignore_eos)


async def stream_one(
    client: httpx.AsyncClient,
    url: str,
    workload: ServingWorkload,
    model: str,
    planned: PlannedRequest,
    timer: Timer,
) -> RequestTiming:
    """One request, whatever the server does: its timings, or an error saying what went wrong; nothing raised.
    The deadline covers the whole request: httpx's timeout is per read, and a server that drips a byte a second
    (or streams forever) never trips it."""
    start_s = timer()
    try:
        async with asyncio.timeout(workload.request_timeout_s):
            return await _stream(client, url, workload, model, planned, timer, start_s)
    except TimeoutError:
        error = f"TimeoutError: no complete answer within {workload.request_timeout_s:g} s"
    except MalformedAnswer as failure:
        error = str(failure)
    except Exception as failure:  # a stranger's server can make any step fail: it fails this request, not the sweep
        error = f"{type(failure).__name__}: {failure}"
    return RequestTiming(start_s, timer(), error=error[:ERROR_BODY_MAX_CHARS])


def budget_spent(workload: ServingWorkload) -> str:
    return f"not measured: the sweep's budget of {workload.sweep_budget_s:g} s was spent"


async def run_level(
    client: httpx.AsyncClient,
    url: str,
    workload: ServingWorkload,
    model: str,
    level: int,
    timer: Timer,
    deadline_s: float,
) -> LevelSummary:
    """The level's requests, c at a time; those still unfinished at the sweep's deadline count as failed."""
    planned_requests = plan_requests(workload, level)
    planned = iter(planned_requests)
    timings: list[RequestTiming] = []

    async def worker() -> None:
        for request in planned:  # the shared iterator hands each planned request to one worker
            timings.append(await stream_one(client, url, workload, model, request, timer))

    start_s = timer()
    try:
        async with asyncio.timeout_at(deadline_s):
            await asyncio.gather(*(worker() for _ in range(level)))
    except TimeoutError:
        cut_off = RequestTiming(start_s, timer(), error=budget_spent(workload))
        timings += [cut_off] * (len(planned_requests) - len(timings))
    return summarize_level(level, timings, timer() - start_s)


def level_not_run(workload: ServingWorkload, level: int) -> LevelSummary:
    """A level the budget left no time for: all its requests failed, so the verdict cannot pass on the rest."""
    never_sent = RequestTiming(0.0, 0.0, error=budget_spent(workload))
    return summarize_level(level, [never_sent] * workload.requests_at(level), 0.0)


async def read_model_list(client: httpx.AsyncClient, url: str) -> bytes:
    async with client.stream("GET", f"{api_base(url)}/v1/models") as response:
        response.raise_for_status()
        body = await capped_body(response, MODEL_LIST_MAX_BYTES)
    if len(body) > MODEL_LIST_MAX_BYTES:
        raise MalformedAnswer(f"a model list longer than {MODEL_LIST_MAX_BYTES} bytes")
    return body


async def discover_model(client: httpx.AsyncClient, url: str, timeout_s: float) -> str:
    """The endpoint's first listed model. An id with control characters is no real model's: its escaped form is
    what is recorded and asked for, so the raw one reaches no terminal, file or event (and the server, which
    does not know that name, fails each request)."""
    where = f"{api_base(without_credentials(url))}/v1/models"
    try:
        async with asyncio.timeout(timeout_s):
            listed = parse_model_list(await read_model_list(client, url)).data
    except TimeoutError:
        raise ModelDiscoveryFailed(f"{where} did not answer within {timeout_s:g} s") from None
    except MalformedAnswer as error:
        raise ModelDiscoveryFailed(f"{where}: {error}") from None
    if not listed:
        raise ModelDiscoveryFailed(f"{where} lists no model; pass one with --model")
    return printable(listed[0].id, single_line=True)


def build_client(workload: ServingWorkload, api_key: str | None) -> httpx.AsyncClient:
    connections = max(workload.levels) + 1
    headers = {"accept-encoding": "identity"}  # no compressed bodies: see `uncompressed`
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return httpx.AsyncClient(
        headers=headers,
        # httpx's default pool (100) would silently cap the 128 and 256 levels.
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=httpx.Timeout(workload.request_timeout_s, connect=10.0),
    )


async def warm_up(
    client: httpx.AsyncClient, url: str, workload: ServingWorkload, model: str, timer: Timer, deadline_s: float
) -> None:
    """Requests that are not counted (the first ones load kernels and fill caches), within the sweep's budget."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(deadline_s):
            for request in plan_requests(workload, 0)[: workload.warmup_requests]:
                await stream_one(client, url, workload, model, request, timer)


async def run_sweep(
    url: str,
    workload: ServingWorkload,
    *,
    started_at: datetime,
    baseline: ServingRun | None = None,
    api_key: str | None = None,
    timer: Timer = time.perf_counter,
    on_level: Callable[[LevelSummary], None] | None = None,
) -> ServingRun:
    """Run every level in order (after warm-up requests that are not counted) and compare with `baseline`.
    Whatever the server answers, it ends within discovery's request timeout plus the sweep's budget."""
    async with build_client(workload, api_key) as client:
        model = workload.model or await discover_model(client, url, workload.request_timeout_s)
        target = endpoint(url, workload.api)
        deadline_s = asyncio.get_running_loop().time() + workload.sweep_budget_s
        await warm_up(client, target, workload, model, timer, deadline_s)
        levels = []
        for level in workload.levels:
            if asyncio.get_running_loop().time() < deadline_s:
                summary = await run_level(client, target, workload, model, level, timer, deadline_s)
            else:
                summary = level_not_run(workload, level)
            levels.append(summary)
            if on_level is not None:
                on_level(summary)
    run = ServingRun(
        url=without_credentials(url),
        model=model,
        workload=workload,
        started_at=started_at,
        levels=levels,
    )
    if baseline is not None:
        run = run.model_copy(update={"comparison": compare_runs(run, baseline)})
    return run
