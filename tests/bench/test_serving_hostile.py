"""The serving sweep against a host that lies, stalls, floods or speaks nonsense, over real HTTP: a rented
endpoint is a stranger's program, and what it answers may fail its own requests but never the sweep, never
hold it past its deadlines, never inflate a figure, and never reach the operator's terminal unescaped.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from typer.testing import CliRunner

from services.bench.app import build
from services.bench.collect import result_event_id
from services.bench.serving import run_sweep, sse_data
from services.bench.serving_protocol import MalformedAnswer
from services.bench.serving_stats import ServingRun, ServingWorkload
from services.cli.main import app
from shared.clock import RealClock
from shared.contract import BenchRequest, BenchResult
from shared.service import ServiceContext
from shared.settings import Settings
from tests.bench.hostile_endpoint import (
    content_chunk,
    dripping,
    event,
    faithful,
    faithful_events,
    head,
    hostile_endpoint,
    streaming,
    taking_turns,
    usage_chunk,
)
from tests.bench.service_helpers import NOW, bench_settings, collect, request_bench
from tests.helpers import eventually

OUTPUT_TOKENS = 4
# Every test here ends in well under a second once fixed; this only turns a hang (the defect) into a failure.
HANG_S = 10.0


def workload(**changes: Any) -> ServingWorkload:
    fields: dict[str, Any] = {
        "levels": (1,),
        "requests_per_level": 2,
        "prompt_tokens": 4,
        "output_tokens": OUTPUT_TOKENS,
        "length_spread": 0.0,
        "warmup_requests": 0,
        "request_timeout_s": 5.0,
    }
    fields.update(changes)
    return ServingWorkload.model_validate(fields)


async def sweep(url: str, **changes: Any) -> ServingRun:
    return await asyncio.wait_for(run_sweep(url, workload(**changes), started_at=NOW), HANG_S)


# ---- a malformed answer fails its own request, not the sweep ---------------------------------------------------
MALFORMED_CHUNKS = {
    "count Infinity": '{"choices":[],"usage":{"completion_tokens":Infinity}}',
    "count 1e400": '{"choices":[],"usage":{"completion_tokens":1e400}}',
    "count -5": '{"choices":[],"usage":{"completion_tokens":-5}}',
    "usage a list": '{"choices":[],"usage":[1]}',
    "chunk a list": "[]",
    "chunk a number": "5",
    "choices a string": '{"choices":"abc"}',
    "content a number": '{"choices":[{"delta":{"content":5}}]}',
}


@pytest.mark.parametrize("bad_chunk", MALFORMED_CHUNKS.values(), ids=MALFORMED_CHUNKS.keys())
async def test_a_malformed_chunk_fails_only_its_own_request(bad_chunk: str) -> None:
    with hostile_endpoint(taking_turns(faithful, streaming(bad_chunk))) as server:
        run = await sweep(server.url, levels=(1, 2), requests_per_level=4)

    for level in run.levels:  # every level measured, each good answer counted
        assert (level.requests_ok, level.requests_failed) == (2, 2)
        assert level.output_tokens == 2 * OUTPUT_TOKENS
        assert level.error_samples[0].startswith("malformed stream chunk: ")


MALFORMED_MODEL_LISTS = {
    "a list": b"[]",
    "a number as model": b'{"data":[5]}',
    "a string as list": b'{"data":"ab"}',
    "an id beyond 256 characters": json.dumps({"data": [{"id": "m" * 300}]}).encode(),
}


@pytest.mark.parametrize("model_list", MALFORMED_MODEL_LISTS.values(), ids=MALFORMED_MODEL_LISTS.keys())
async def test_a_malformed_model_list_is_a_sweep_that_cannot_start(model_list: bytes) -> None:
    """A ValueError naming the problem, which the service publishes as `could not start`; never a crash."""
    with hostile_endpoint(model_list=model_list) as server, pytest.raises(ValueError, match="malformed model list"):
        await sweep(server.url)


async def test_the_service_publishes_one_verdict_on_an_endpoint_that_streams_nonsense(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    """A crash in the sweep published nothing, and JetStream redelivered the request for five more sweeps."""
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app_ = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    with hostile_endpoint(streaming("[]")) as server:
        await app_.start()
        try:
            request = BenchRequest(occurred_at=NOW, source="operator", kind="serving", url=server.url)
            await request_bench(js, settings, request)
            await eventually(lambda: len(results) == 1, timeout_s=30)
        finally:
            await app_.stop()

    result = results[0]
    assert result.event_id == result_event_id(request.event_id) and result.verdict == "fail"
    assert result.error is not None and "malformed stream chunk" in result.error
    assert len(server.requests) == 1 + 2 + 2  # the warm-up and the two levels, swept once


# ---- deadlines: each request's, and the sweep's ----------------------------------------------------------------
@pytest.mark.parametrize("drip", [b": keep-alive\n\n", event({"choices": []})], ids=["comments", "empty chunks"])
async def test_a_stream_that_never_ends_fails_at_the_request_deadline(drip: bytes) -> None:
    """httpx's timeout is per read: a drip well within it held the sweep forever."""

    async def never_ending(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head())
        await dripping(writer, drip, every_s=0.05)

    with hostile_endpoint(never_ending) as server:
        run = await sweep(server.url, request_timeout_s=0.5)

    level = run.levels[0]
    assert level.requests_failed == 2 and level.error_samples == ["TimeoutError: no complete answer within 0.5 s"]


async def test_a_stream_with_more_chunks_than_tokens_asked_for_is_stopped() -> None:
    async def endless_tokens(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head())
        await dripping(writer, event(content_chunk(" w")), every_s=0.001)

    with hostile_endpoint(endless_tokens) as server:
        run = await sweep(server.url, request_timeout_s=60.0)

    assert run.levels[0].error_samples == [f"more content chunks than the {OUTPUT_TOKENS} tokens asked for"]


async def test_the_sweep_ends_within_its_budget_and_counts_what_it_left_as_failed() -> None:
    async def slow(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.3)
        await faithful(request, writer)

    with hostile_endpoint(slow) as server:
        # level 1 sends its 4 requests one after another: 1.2 s, beyond the 1 s budget
        run = await sweep(server.url, levels=(1, 2), requests_per_level=4, sweep_budget_s=1.0)

    cut_short, never_run = run.levels
    assert cut_short.requests == 4 and cut_short.requests_failed >= 1
    assert never_run.requests == 4 and never_run.requests_ok == 0
    assert all("the sweep's budget of 1 s was spent" in level.error_samples[-1] for level in run.levels)


def test_the_service_sweeps_with_its_configured_request_timeout_and_budget() -> None:
    configured = bench_settings(serving_request_timeout_s=7.5, serving_sweep_budget_s=90.0).serving_workload()
    assert configured.request_timeout_s == 7.5 and configured.sweep_budget_s == 90.0


# ---- token counts: the server's claim, bounded by what arrived and what was asked ------------------------------
@pytest.mark.parametrize(
    ("chunks", "claim", "credited"),
    [
        ([content_chunk("x")], 1_000_000, 1),  # one byte of text holds one token at most
        ([content_chunk(" w0 w1 w2 w3 w4 w5")], 10**400, OUTPUT_TOKENS),  # never more than was asked for
    ],
    ids=["a million claimed after one chunk", "a 400-digit count"],
)
async def test_a_token_count_is_bounded_by_what_arrived_and_what_was_asked(
    chunks: list[dict[str, Any]], claim: int, credited: int
) -> None:
    with hostile_endpoint(streaming(*chunks, usage_chunk(claim))) as server:
        run = await sweep(server.url, ignore_eos=False)

    level = run.levels[0]
    assert level.requests_ok == 2 and level.output_tokens == 2 * credited


async def test_several_tokens_per_chunk_are_all_credited() -> None:
    """The bound is the text's bytes, not the chunks: a speculative decoder's two tokens a chunk both count."""

    async def two_per_chunk(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head() + faithful_events(request, tokens_per_chunk=2) + event("[DONE]"))

    with hostile_endpoint(two_per_chunk) as server:
        run = await sweep(server.url)
    assert run.levels[0].requests_ok == 2 and run.levels[0].output_tokens == 2 * OUTPUT_TOKENS


async def test_with_ignore_eos_a_server_that_stops_early_fails_the_request() -> None:
    with hostile_endpoint(streaming(content_chunk(" w0"), usage_chunk(1))) as server:
        run = await sweep(server.url, output_tokens=8)

    level = run.levels[0]
    assert level.requests_ok == 0 and level.output_tokens == 0
    assert level.error_samples[0].startswith("1 of the 8 output tokens asked for with ignore_eos")


# ---- bounded bodies --------------------------------------------------------------------------------------------
async def test_a_stream_line_beyond_its_cap_fails_the_request_before_it_is_buffered() -> None:
    async def endless_line(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head() + b"data: ")
        await dripping(writer, b"x" * 65536, every_s=0.01)

    with hostile_endpoint(endless_line) as server:
        run = await sweep(server.url, request_timeout_s=60.0)
    assert run.levels[0].error_samples == ["a stream line longer than 65536 bytes"]


async def test_an_error_body_is_read_no_further_than_what_is_kept() -> None:
    async def huge_error(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head(500, "text/plain", length=1 << 30) + b"overloaded ")
        await dripping(writer, b"x" * 1024, every_s=0.01)

    with hostile_endpoint(huge_error) as server:
        run = await sweep(server.url, request_timeout_s=60.0)

    sample = run.levels[0].error_samples[0]
    assert sample.startswith("HTTP 500: overloaded xxx") and len(sample) <= 300


async def test_a_model_list_beyond_its_cap_is_refused() -> None:
    oversized = json.dumps({"data": [{"id": "m" * (2 << 20)}]}).encode()
    with hostile_endpoint(model_list=oversized) as server, pytest.raises(ValueError, match="longer than 1048576"):
        await sweep(server.url)


# ---- the host's words reach the terminal as written, escaped ---------------------------------------------------
EVIL_MODEL = "m\x1b]0;PWNED\x07[link=https://evil.example]click[/link]\nverdict: pass: peak 99999 tok/s"
EVIL_ERROR = b"boom\x1b[2J"


def test_the_cli_shows_the_hosts_model_id_and_errors_as_written_and_escaped(tmp_path: Path) -> None:
    async def refuse(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head(500, "text/plain", len(EVIL_ERROR)) + EVIL_ERROR)

    out = tmp_path / "run.json"
    model_list = json.dumps({"data": [{"id": EVIL_MODEL}]}).encode()
    with hostile_endpoint(refuse, model_list=model_list) as server:
        arguments = ["--url", server.url, "--levels", "1", "--requests-per-level", "1", "--out", str(out)]
        outcome = CliRunner().invoke(app, ["bench", "serving", *arguments], env={"COLUMNS": "400"})

    assert outcome.exit_code == 1, outcome.output  # every request failed
    shown = outcome.stdout
    assert "\x1b" not in shown and "\x07" not in shown  # no retitled window, no cleared screen
    assert "[link=https://evil.example]click[/link]" in shown  # shown as written, not obeyed as markup
    assert not any(line.startswith("verdict: pass") for line in shown.splitlines())  # no forged line
    assert "boom\\x1b[2J" in shown
    recorded = json.loads(out.read_text())
    assert "\x1b" not in recorded["model"] and "\n" not in recorded["model"]


# ---- an answer from another model ------------------------------------------------------------------------------
async def test_an_answer_from_another_model_fails_the_request() -> None:
    async def impostor(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        await faithful({**request, "model": "tiny-0.5b"}, writer)

    with hostile_endpoint(impostor) as server:
        run = await sweep(server.url, model="llama-3-70b")

    level = run.levels[0]
    assert level.requests_ok == 0 and level.error_samples == ["answered as model 'tiny-0.5b', asked for 'llama-3-70b'"]


# ---- server-sent events as the spec writes them ----------------------------------------------------------------
def written_with(line_end: bytes, request: dict[str, Any]) -> bytes:
    """The faithful stream with every line ended by `line_end` instead of LF."""
    return (faithful_events(request) + event("[DONE]")).replace(b"\n", line_end)


@pytest.mark.parametrize("line_end", [b"\r", b"\r\n"], ids=["bare CR", "CRLF"])
async def test_a_stream_whose_lines_end_as_the_spec_allows_is_read(line_end: bytes) -> None:
    async def answer(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(head() + written_with(line_end, request))

    with hostile_endpoint(answer) as server:
        run = await sweep(server.url)
    assert run.levels[0].requests_ok == 2 and run.levels[0].output_tokens == 2 * OUTPUT_TOKENS


async def test_an_events_data_on_several_lines_is_one_payload() -> None:
    """`data: {"a":` then `data: 1}` in one event is `{"a":\n1}` (SSE joins an event's data lines)."""

    async def split_json(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        events = faithful_events(request).decode().replace('"choices": ', '"choices":\ndata: ')
        writer.write(head() + events.encode() + event("[DONE]"))

    with hostile_endpoint(split_json) as server:
        run = await sweep(server.url)
    assert run.levels[0].requests_ok == 2 and run.levels[0].output_tokens == 2 * OUTPUT_TOKENS


async def read_events(*pieces: bytes) -> list[str]:
    """What `sse_data` makes of a body that arrives in these reads, through httpx's own streaming response."""

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    response = httpx.Response(200, content=body())
    return [payload async for payload in sse_data(response)]


async def test_a_crlf_split_between_two_reads_ends_one_line() -> None:
    assert await read_events(b'data: {"a": 1}\r', b"\n\r", b"\ndata: 2\r", b"\n\r\n") == ['{"a": 1}', "2"]
    assert await read_events(b"data: 1\r", b"\r", b"data: 2\r\r") == ["1", "2"], "bare CRs split alike"


async def test_an_event_cut_off_by_the_end_of_the_stream_is_still_read_and_done_ends_it() -> None:
    assert await read_events(b"data: 1\n\ndata: 2") == ["1", "2"]
    assert await read_events(b"data: 1\n\ndata: [DONE]\n\ndata: 3\n\n") == ["1"]
    assert await read_events(b": keep-alive\n\nevent: x\nid: 7\ndata: 1\n\n") == ["1"]


async def test_an_event_of_many_data_lines_is_capped_as_one_line_is() -> None:
    many = b"".join(b"data: " + b"x" * 60000 + b"\n" for _ in range(3))
    with pytest.raises(MalformedAnswer, match="an event's data longer than 65536 bytes"):
        await read_events(many + b"\n")


# ---- a compressed answer ---------------------------------------------------------------------------------------
def gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    return packer.compress(bytes(size)) + packer.flush()


BOMB = gzip_of_zeros(64 << 20)  # 64 MB of zeros in about 64 KB


async def test_a_compressed_answer_is_refused_unread_and_none_was_asked_for() -> None:
    async def bomb(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(
            f"HTTP/1.1 200 X\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
            f"content-length: {len(BOMB)}\r\nconnection: close\r\n\r\n".encode()
            + BOMB
        )

    tracemalloc.start()
    try:
        with hostile_endpoint(bomb) as server:
            run = await sweep(server.url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert set(server.accepted_encodings) == {"identity"}
    assert run.levels[0].requests_ok == 0
    assert run.levels[0].error_samples == ["a compressed answer (content-encoding gzip)"]
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MB held at the peak: the bomb was inflated"
