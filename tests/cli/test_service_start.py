"""A service started before its NATS: it says where it waits, is unhealthy meanwhile, stops on SIGTERM or
Ctrl-C, and becomes healthy once NATS is there. Real `fleetpilot run` processes, real nats-server."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import nats
import pytest

from shared.processes import free_port, stop_process
from shared.settings import Settings
from shared.streams import ensure_streams
from sim.infra import NatsServer, RedisServer
from tests.cli.conftest import FLEETPILOT, cli_environment

# a hang guard for each wait below, not a speed requirement (speed lives in the benchmarks)
GUARD_S = 60.0


def wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {GUARD_S:.0f}s: {what}")
        time.sleep(0.1)


async def declare_streams(url: str) -> None:
    client = await nats.connect(url)
    await ensure_streams(client.jetstream(), Settings(subject_prefix="fpt").subjects)
    await client.close()


def health(port: int) -> httpx.Response | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5.0)
    except httpx.HTTPError:
        return None


def log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


class ServiceProcess:
    """`fleetpilot run decider` with its output in a file."""

    def __init__(self, workdir: Path, nats_url: str, redis_url: str) -> None:
        self.http_port = free_port()
        self.log_path = workdir / f"decider-{self.http_port}.log"
        env = cli_environment(
            FLEETPILOT_NATS_URL=nats_url,
            FLEETPILOT_REDIS_URL=redis_url,
            FLEETPILOT_HTTP_HOST="127.0.0.1",
            FLEETPILOT_HTTP_PORT=str(self.http_port),
            FLEETPILOT_SUBJECT_PREFIX="fpt",
        )
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [str(FLEETPILOT), "run", "decider"], env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def log(self) -> str:
        return log_text(self.log_path)

    def stop(self) -> None:
        stop_process(self.process, timeout_s=GUARD_S)


@pytest.fixture
def nats_not_yet(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server with its port chosen but not started: the test starts it when it wants."""
    server = NatsServer(data_dir=tmp_path / "nats")
    yield server
    server.close()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_waiting_for_nats_it_says_where_is_unhealthy_and_stops_on_a_signal(
    tmp_path: Path, nats_not_yet: NatsServer, redis_server: RedisServer, stop_signal: signal.Signals
) -> None:
    url_with_password = nats_not_yet.url.replace("nats://", "nats://decider:pa55word@")
    service = ServiceProcess(tmp_path, url_with_password, redis_server.url)
    try:
        wait_until(lambda: "waiting for NATS at" in service.log, "the waiting line")
        wait_until(lambda: health(service.http_port) is not None, "/health answering")
        response = health(service.http_port)
        assert response is not None and response.status_code == 503
        assert response.json()["reasons"] == [f"not connected to NATS at {nats_not_yet.url}"]
        service.process.send_signal(stop_signal)
        exit_code = service.process.wait(timeout=GUARD_S)
    finally:
        service.stop()
    assert exit_code in (0, -stop_signal, 128 + stop_signal), exit_code
    assert f"waiting for NATS at {nats_not_yet.url} (connection refused)" in service.log
    assert "pa55word" not in service.log and "Traceback" not in service.log


def test_it_becomes_healthy_once_nats_is_there(
    tmp_path: Path, nats_not_yet: NatsServer, redis_server: RedisServer
) -> None:
    service = ServiceProcess(tmp_path, nats_not_yet.url, redis_server.url)
    try:
        wait_until(lambda: "waiting for NATS at" in service.log, "the waiting line")
        nats_not_yet.start()
        asyncio.run(declare_streams(nats_not_yet.url))  # the admin step, as a deployment runs it
        wait_until(lambda: (r := health(service.http_port)) is not None and r.status_code == 200, "healthy")
        assert service.process.poll() is None
    finally:
        service.stop()
    assert service.process.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
