"""Ollama's HTTP face (`/api/chat`, `/api/tags`, `/api/show`, `/api/version`) in front of an OpenAI-compatible
server such as llama-server, so the agent's ollama client talks to a local model unchanged."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from evaluation.llm.ollama_openai import (
    RequestError,
    StreamAssembler,
    done_fields,
    from_openai_response,
    offered_tool_names,
    ollama_message,
    to_openai_request,
)

ADAPTER_VERSION = "0.6.3-llama-server"
# one answer of a 0.5B model on two busy cores can take minutes; the client's own timeout is the real bound
UPSTREAM_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ModelCard:
    """What `/api/tags` and `/api/show` say about the one model the upstream serves."""

    name: str = "qwen2.5-coder:0.5b"
    family: str = "qwen2"
    parameter_size: str = "494M"
    quantization: str = "Q4_K_M"
    context_length: int = 8192
    size_bytes: int = 0
    digest: str = ""

    def details(self) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.family,
            "families": [self.family],
            "parameter_size": self.parameter_size,
            "quantization_level": self.quantization,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _error(status: int, text: str) -> JSONResponse:
    return JSONResponse({"error": text}, status_code=status)


async def _json_object(request: Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _upstream_error(error: httpx.HTTPError | ValueError) -> JSONResponse:
    if isinstance(error, httpx.HTTPStatusError):
        return _error(502, f"model server answered HTTP {error.response.status_code}: {error.response.text[:300]}")
    return _error(502, f"model server unreachable or unreadable ({type(error).__name__}: {str(error)[:200]})")


def build_adapter(upstream_url: str, card: ModelCard, client: httpx.AsyncClient | None = None) -> Starlette:
    """`upstream_url`: the OpenAI-compatible server's base URL (without `/v1`)."""
    http = client or httpx.AsyncClient(base_url=upstream_url, timeout=UPSTREAM_TIMEOUT_S)

    def model_known(name: Any) -> bool:
        return isinstance(name, str) and name in (card.name, card.name.removesuffix(":latest"), f"{card.name}:latest")

    async def root(request: Request) -> Response:
        return PlainTextResponse("Ollama is running")

    async def version(request: Request) -> Response:
        return JSONResponse({"version": ADAPTER_VERSION})

    async def tags(request: Request) -> Response:
        entry = {
            "name": card.name,
            "model": card.name,
            "modified_at": "2026-01-01T00:00:00Z",
            "size": card.size_bytes,
            "digest": card.digest,
            "details": card.details(),
        }
        return JSONResponse({"models": [entry]})

    async def show(request: Request) -> Response:
        body = await _json_object(request)
        if body is None:
            return _error(400, "invalid JSON body")
        name = body.get("model") or body.get("name")
        if not model_known(name):
            return _error(404, f"model '{name}' not found")
        return JSONResponse(
            {
                "modelfile": f"# served by llama-server through the FleetPilot adapter\nFROM {card.name}",
                "parameters": "",
                "template": "",
                "details": card.details(),
                "model_info": {
                    "general.architecture": card.family,
                    "general.basename": card.name,
                    f"{card.family}.context_length": card.context_length,
                },
                "capabilities": ["completion", "tools"],
                "modified_at": "2026-01-01T00:00:00Z",
            }
        )

    async def chat(request: Request) -> Response:
        body = await _json_object(request)
        if body is None:
            return _error(400, "invalid JSON body")
        if not body.get("model"):
            return _error(400, "model is required")
        if not model_known(body["model"]):
            return _error(404, f"model '{body['model']}' not found, try pulling it first")
        try:
            upstream = to_openai_request(body, card.name)
        except RequestError as error:
            return _error(400, str(error))
        offered = offered_tool_names(upstream.get("tools") or [])
        started = time.monotonic_ns()
        if upstream["stream"]:
            return await _stream(upstream, offered, started)
        try:
            response = await http.post("/v1/chat/completions", json=upstream)
            response.raise_for_status()
            result = from_openai_response(response.json(), offered)
        except (httpx.HTTPError, ValueError) as error:
            return _upstream_error(error)
        return JSONResponse(
            {
                "model": card.name,
                "created_at": _now(),
                "message": ollama_message(result),
                **done_fields(result, time.monotonic_ns() - started),
            }
        )

    async def _stream(upstream: dict[str, Any], offered: frozenset[str], started: int) -> Response:
        request = http.build_request("POST", "/v1/chat/completions", json=upstream)
        try:
            response = await http.send(request, stream=True)
            response.raise_for_status()
        except httpx.HTTPStatusError as error:
            await error.response.aread()
            await error.response.aclose()
            return _upstream_error(error)
        except httpx.HTTPError as error:
            return _upstream_error(error)

        def line(payload: dict[str, Any]) -> bytes:
            return (json.dumps({"model": card.name, "created_at": _now(), **payload}) + "\n").encode()

        async def ndjson() -> AsyncIterator[bytes]:
            assembler = StreamAssembler(offered)
            try:
                async for raw in response.aiter_lines():
                    if not raw.startswith("data:"):
                        continue
                    data = raw[len("data:") :].strip()
                    if data == "[DONE]":
                        break
                    text = assembler.feed(json.loads(data))
                    if text:
                        yield line({"message": {"role": "assistant", "content": text}, "done": False})
            except (httpx.HTTPError, ValueError) as error:
                yield line({"error": f"model server stream broke off ({type(error).__name__})"})
                return
            finally:
                await response.aclose()
            result = assembler.finish()
            if result.content or result.tool_calls:
                yield line({"message": ollama_message(result), "done": False})
            final = {
                "message": {"role": "assistant", "content": ""},
                **done_fields(result, time.monotonic_ns() - started),
            }
            yield line(final)

        return StreamingResponse(ndjson(), media_type="application/x-ndjson")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if client is None:
            await http.aclose()

    return Starlette(
        routes=[
            Route("/", root, methods=["GET", "HEAD"]),
            Route("/api/version", version),
            Route("/api/tags", tags),
            Route("/api/show", show, methods=["POST"]),
            Route("/api/chat", chat, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
