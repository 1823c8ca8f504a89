"""Attacks a rented host can make on bench's intake, made over real HTTP against the service on NATS and Redis.

Every vast.ai host runs our onstart line and sees its own environment, so it holds its own report token and can
post anything to the public intake. Each test plays one such host and checks what the fleet hears.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any

import httpx
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from redis.asyncio import Redis

from services.bench.app import build
from shared.clock import RealClock
from shared.contract import BenchResult
from shared.service import ServiceContext
from shared.settings import Settings
from tests.bench.service_helpers import (
    TOKEN,
    bench_settings,
    collect,
    gpu_request,
    label_for,
    over_http,
    post_report,
    request_bench,
    suite_report,
    token_for,
)
from tests.helpers import eventually

VICTIM, ATTACKER = 501, 502


async def test_a_host_cannot_file_a_report_for_another_of_our_instances(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    async with over_http(app) as base_url:
        await request_bench(js, settings, gpu_request(VICTIM))
        await eventually(lambda: _pending(settings, VICTIM))
        # the attacker's own, valid token, on a failing report that names the victim
        forged = suite_report(VICTIM, 1.0, errors=["made up: CUDA error"])
        refused = await post_report(base_url, forged, token=token_for(ATTACKER))
        assert refused.status_code == 403 and "instance_id" in refused.text

        genuine = await post_report(base_url, suite_report(VICTIM, 1.0))
        assert genuine.status_code == 202
        await eventually(lambda: len(results) == 1)
    [result] = results
    assert result.instance_id == VICTIM and result.verdict == "pass", result.explanation


async def test_a_report_sent_ahead_under_another_instances_id_never_judges_that_instance(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    """Before any request exists the attacker names an id (ours later, or never rented): its report is filed
    under its own label, so the instance that id becomes is judged on its own report alone."""
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    async with over_http(app) as base_url:
        ahead = await post_report(base_url, suite_report(VICTIM, 0.1), token=token_for(ATTACKER))
        assert ahead.status_code == 202 and ahead.json()["result_published"] is False
        await request_bench(js, settings, gpu_request(VICTIM))
        await eventually(lambda: _pending(settings, VICTIM))  # the request met no report of its own yet
        genuine = await post_report(base_url, suite_report(VICTIM, 1.0))
        assert genuine.status_code == 202
        await eventually(lambda: len(results) == 1)
    [result] = results
    assert result.instance_id == VICTIM and result.verdict == "pass", result.explanation


async def test_tokens_we_never_issued_are_refused_before_anything_is_stored(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    redis = Redis.from_url(settings.redis_url)
    unissued = "fleetpilot:never-rented:0"
    guessed_mac = hmac.new(b"a guess", unissued.encode(), hashlib.sha256).hexdigest()
    try:
        async with over_http(app) as base_url:
            for token in (
                TOKEN,  # the deployment's secret itself, as the old shared token was sent
                f"{unissued}.{guessed_mac}",  # a label we never issued, with a made-up MAC
                f"{label_for(VICTIM)}.{guessed_mac}",  # a real label, without its MAC
                token_for(VICTIM) + "0",
            ):
                response = await post_report(base_url, suite_report(VICTIM, 1.0), token=token)
                assert response.status_code == 401, token
        assert [key async for key in redis.scan_iter(match=f"{settings.subjects.prefix}:bench:report:*")] == []
    finally:
        await redis.aclose()


async def test_a_replayed_report_is_refused_and_judged_once(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    async with over_http(app) as base_url:
        report = suite_report(VICTIM, 1.0)
        assert (await post_report(base_url, report)).status_code == 202
        # a second, different report from the same machine before its request: no overwriting its first
        assert (await post_report(base_url, suite_report(VICTIM, 0.1))).status_code == 409
        await request_bench(js, settings, gpu_request(VICTIM))
        await eventually(lambda: len(results) == 1)
        assert (await post_report(base_url, report)).status_code == 409  # and after its verdict
    [result] = results
    assert result.verdict == "pass"


async def test_a_flood_from_one_host_is_rate_limited_and_stores_one_report(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings(report_burst=3, report_per_minute=1.0))
    redis = Redis.from_url(settings.redis_url)
    try:
        async with over_http(app) as base_url:
            statuses = [(await post_report(base_url, suite_report(ATTACKER, 1.0))).status_code for _ in range(10)]
        assert statuses[:3] == [202, 409, 409] and set(statuses[3:]) == {429}
        keys = [key async for key in redis.scan_iter(match=f"{settings.subjects.prefix}:bench:report:*")]
        assert len(keys) == 1
    finally:
        await redis.aclose()


async def test_a_body_over_the_limit_is_refused_before_it_is_read(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    """A declared gigabyte is answered at once, before a byte of it is sent; a body sent without a length
    (chunked) is cut off where it passes the limit."""
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings(report_max_bytes=2048))
    padded = {**suite_report(ATTACKER, 1.0), "facts": {f"pad_{n}": "x" * 200 for n in range(30)}}
    body = json.dumps(padded).encode()
    assert len(body) > 2048
    headers = {"authorization": f"Bearer {token_for(ATTACKER)}", "content-type": "application/json"}

    async def chunks() -> Any:
        for start in range(0, len(body), 512):
            yield body[start : start + 512]

    async with over_http(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        status_line = await _answer_to_declared_body(base_url, headers, declared_bytes=10**9)
        chunked = await client.post("/bench/report", content=chunks(), headers=headers)
    assert status_line.startswith("HTTP/1.1 413"), status_line
    assert chunked.status_code == 413


async def _answer_to_declared_body(base_url: str, headers: dict[str, str], declared_bytes: int) -> str:
    """The status line bench answers with to headers declaring `declared_bytes`, none of which are sent.
    An intake that read the body first would wait for it, and this would fail waiting (no answer)."""
    host, port = httpx.URL(base_url).host, httpx.URL(base_url).port
    assert port is not None
    reader, writer = await asyncio.open_connection(host, port)
    lines = ["POST /bench/report HTTP/1.1", f"host: {host}", f"content-length: {declared_bytes}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    try:
        return (await asyncio.wait_for(reader.readline(), timeout=10)).decode()
    finally:
        writer.close()


async def test_made_up_speed_or_a_claimed_gpu_fails_against_what_vast_lists(
    settings: Settings, nc: NatsClient, js: JetStreamContext
) -> None:
    results = await collect(nc, settings.subjects.bench_result, BenchResult)
    app = build(ServiceContext("bench", settings, RealClock()), bench_settings())
    fast = suite_report(601, 1.0)
    fast["metrics"] = {name: value * 1e9 for name, value in fast["metrics"].items()}
    cases = {
        601: (fast, "H100 SXM"),  # every metric a billion times the reference
        602: (suite_report(602, 1.0), "RTX 4090"),  # an H100's numbers from a machine vast lists as a 4090
        603: (suite_report(603, 1.0), "Tesla K80"),  # a model no reference covers
        604: ({**suite_report(604, 1.0), "device": "cpu"}, "H100 SXM"),  # a CPU run from a GPU machine
        605: (suite_report(605, 1.0), "H100 SXM"),  # an H100's numbers from one of the four GPUs vast lists
    }
    listed_gpus = {605: 4}
    async with over_http(app) as base_url:
        for instance_id, (report, listed) in cases.items():
            request = gpu_request(instance_id, gpu_model=listed, num_gpus=listed_gpus.get(instance_id))
            await request_bench(js, settings, request)
            assert (await post_report(base_url, report)).status_code == 202
        await eventually(lambda: len(results) == len(cases))
    verdicts = {r.instance_id: r for r in results}
    assert {i: r.verdict for i, r in verdicts.items()} == dict.fromkeys(cases, "fail")
    assert "beyond what this GPU can do" in verdicts[601].explanation and verdicts[601].ratios_to_reference == {}
    assert "vast lists RTX 4090" in verdicts[602].explanation
    assert "no reference for the listed GPU 'Tesla K80'" in verdicts[603].explanation
    assert "CPU run" in verdicts[604].explanation
    assert verdicts[605].explanation == "H100 SXM: fail: the machine shows 1 GPU, vast lists 4"


async def _pending(settings: Settings, instance_id: int) -> bool:
    redis = Redis.from_url(settings.redis_url)
    try:
        return bool(await redis.hexists(f"{settings.subjects.prefix}:bench:pending", str(instance_id)))
    finally:
        await redis.aclose()
