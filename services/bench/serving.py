"""The serving benchmark's client: streams OpenAI-compatible completions at each concurrency level over httpx.

At level c, c workers take the level's planned requests in turn (so c requests are in flight until the
last wave), each timing its first token and every content chunk from the server-sent events.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx

from services.bench.serving_stats import (
    LevelSummary,
    PlannedRequest,
    RequestTiming,
    ServingRun,
    ServingWorkload,
    compare_runs,
    plan_requests,
    summarize_level,
    without_credentials,
)

Timer = Callable[[], float]
ERROR_BODY_MAX_CHARS = 300


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


def chunk_text(chunk: dict[str, Any]) -> str:
    """The generated text in one streamed chunk (reasoning models stream `reasoning_content` first)."""
    text = ""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        text += (delta.get("content") or "") + (delta.get("reasoning_content") or "") + (choice.get("text") or "")
    return text


async def stream_one(client: httpx.AsyncClient, url: str, body: dict[str, Any], timer: Timer) -> RequestTiming:
    start_s = timer()
    chunk_times: list[float] = []
    usage_tokens: int | None = None
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:ERROR_BODY_MAX_CHARS]
                return RequestTiming(start_s, timer(), error=f"HTTP {response.status_code}: {text}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    return RequestTiming(start_s, timer(), error=f"stream error: {str(chunk['error'])[:200]}")
                if chunk_text(chunk):
                    chunk_times.append(timer())
                if chunk.get("usage"):
                    usage_tokens = int(chunk["usage"].get("completion_tokens") or 0)
    except (httpx.HTTPError, json.JSONDecodeError, ValueError) as error:
        return RequestTiming(start_s, timer(), error=f"{type(error).__name__}: {error}"[:ERROR_BODY_MAX_CHARS])
    end_s = timer()
    if not chunk_times:
        return RequestTiming(start_s, end_s, error="stream ended without a token")
    return RequestTiming(
        start_s=start_s,
        end_s=end_s,
        first_token_s=chunk_times[0],
        chunk_times_s=tuple(chunk_times),
        output_tokens=usage_tokens if usage_tokens else len(chunk_times),
    )


async def run_level(
    client: httpx.AsyncClient,
    url: str,
    workload: ServingWorkload,
    model: str,
    level: int,
    timer: Timer,
) -> LevelSummary:
    planned = iter(plan_requests(workload, level))
    timings: list[RequestTiming] = []

    async def worker() -> None:
        for request in planned:  # the shared iterator hands each planned request to one worker
            timings.append(await stream_one(client, url, request_body(workload, model, request), timer))

    start_s = timer()
    await asyncio.gather(*(worker() for _ in range(level)))
    return summarize_level(level, timings, timer() - start_s)


async def discover_model(client: httpx.AsyncClient, url: str) -> str:
    response = await client.get(f"{api_base(url)}/v1/models")
    response.raise_for_status()
    models = response.json().get("data") or []
    if not models:
        raise ValueError(f"{without_credentials(url)}/v1/models lists no model; pass one with --model")
    return str(models[0]["id"])


def build_client(workload: ServingWorkload, api_key: str | None) -> httpx.AsyncClient:
    connections = max(workload.levels) + 1
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(
        headers=headers,
        # httpx's default pool (100) would silently cap the 128 and 256 levels.
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=httpx.Timeout(workload.request_timeout_s, connect=10.0),
    )


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
    """Run every level in order (after warm-up requests that are not counted) and compare with `baseline`."""
    async with build_client(workload, api_key) as client:
        model = workload.model or await discover_model(client, url)
        target = endpoint(url, workload.api)
        warmup = plan_requests(workload, 0)[: workload.warmup_requests]
        for request in warmup:
            await stream_one(client, target, request_body(workload, model, request), timer)
        levels = []
        for level in workload.levels:
            summary = await run_level(client, target, workload, model, level, timer)
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
