"""What the bench service tests share: its settings, the bus round trip, a suite report, serving it over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import uvicorn
from faststream.asgi import AsgiFastStream
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from pydantic import SecretStr

from services.bench.config import BenchSettings
from services.bench.gpu_suite import SCHEMA
from services.bench.references import reference_for
from services.bench.tokens import instance_report_token
from shared.bus import event_headers
from shared.contract import BenchRequest
from shared.processes import free_port
from shared.settings import Settings
from shared.streams import BENCH
from tests.helpers import eventually

TOKEN = "report-token-for-tests"
NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def bench_settings(**changes: Any) -> BenchSettings:
    fields: dict[str, Any] = {
        "report_token": TOKEN,
        "report_timeout_s": 600.0,
        "sweep_interval_s": 30.0,
        "local_min_time_s": 0.02,
        "serving_levels": (1, 2),
        "serving_requests_per_level": 2,
        "serving_prompt_tokens": 8,
        "serving_output_tokens": 4,
    }
    fields.update(changes)
    return BenchSettings(**fields)


async def collect(nc: NatsClient, subject: str, model: Any) -> list[Any]:
    received: list[Any] = []

    async def on_message(msg: Any) -> None:
        received.append(model.model_validate_json(msg.data))

    await nc.subscribe(subject, cb=on_message)
    return received


async def request_bench(js: JetStreamContext, settings: Settings, request: BenchRequest) -> None:
    await js.publish(
        settings.subjects.bench_request,
        request.model_dump_json().encode(),
        headers=event_headers(request),
        stream=BENCH.name(settings.subjects),
    )


def label_for(instance_id: int) -> str:
    """The label the provisioner would have given the instance (one launch per instance in these tests)."""
    return f"fleetpilot:launch-{instance_id}:0"


def token_for(instance_id: int, label: str | None = None) -> str:
    """The report token the provisioner puts in that instance's environment."""
    return instance_report_token(SecretStr(TOKEN), label or label_for(instance_id))


def instance_env(instance_id: int) -> dict[str, str]:
    """What the provisioner creates the instance with, as far as its suite needs."""
    return {"FLEETPILOT_INSTANCE_LABEL": label_for(instance_id), "FLEETPILOT_BENCH_TOKEN": token_for(instance_id)}


def gpu_request(
    instance_id: int | None,
    occurred_at: datetime = NOW,
    gpu_model: str | None = "H100 SXM",
    label: str | None = None,
    num_gpus: int | None = None,
) -> BenchRequest:
    """fleet's request for a registered instance, with the label and GPU it learned from vast's listing."""
    if instance_id is not None:
        label = label or label_for(instance_id)
    return BenchRequest(
        occurred_at=occurred_at,
        source="fleet",
        instance_id=instance_id,
        kind="gpu",
        label=label,
        gpu_model=gpu_model if instance_id is not None else None,
        num_gpus=num_gpus if instance_id is not None else None,
    )


def suite_report(
    instance_id: int, share: float, errors: list[str] | None = None, gpu_name: str = "NVIDIA H100 80GB HBM3"
) -> dict[str, Any]:
    """A CUDA suite report (as JSON travels) whose every metric is `share` of the model's expected values."""
    reference = reference_for(gpu_name)
    assert reference is not None, gpu_name
    return {
        "schema": SCHEMA,
        "instance_id": instance_id,
        "device": "cuda",
        "gpu_name": gpu_name,
        "gpu_count": 1,
        "metrics": {name: value * share for name, value in reference.expected_metrics().items()},
        "checks": {"matmul_bf16": True, "matmul_fp16": True, "memory_copy": True, "host_copy": True},
        "errors": errors or [],
        "facts": {"torch": "2.5.1"},
        "started_at": NOW.isoformat(),
        "duration_s": 42.0,
    }


async def post_report(base_url: str, report: dict[str, Any], token: str | None = None) -> httpx.Response:
    """POST as the machine the report names would (its own token), unless `token` says otherwise."""
    token = token if token is not None else token_for(report["instance_id"])
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        return await client.post("/bench/report", json=report, headers={"authorization": f"Bearer {token}"})


class _InProcessServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # in-process, pytest owns the signals
        yield


@contextlib.asynccontextmanager
async def over_http(app: AsgiFastStream) -> AsyncIterator[str]:
    """The service as it runs in production: uvicorn serving the ASGI app, whose lifespan starts the broker."""
    port = free_port()
    server = _InProcessServer(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    await eventually(lambda: server.started or serving.done(), timeout_s=20)
    if serving.done():
        serving.result()
        raise RuntimeError("the bench service stopped while starting")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving
