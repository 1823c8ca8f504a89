"""A service's log on a normal start and stop: one plain format a file can hold (no colour codes), no ERROR and no
traceback, no per-message lines at INFO. A real `fleetpilot run fleet` process on real nats-server and Redis."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from shared.settings import Settings
from sim.infra import NatsServer, RedisServer, free_port
from tests.cli.conftest import FLEETPILOT, cli_environment
from tests.cli.test_service_start import GUARD_S, health, log_text, wait_until

PULL_TIMEOUT_S = 1.0  # a subscriber's empty pull lasts this long (shared/bus.py, durable_pull's PullSub)


def test_a_normal_start_logs_plain_lines_without_errors(
    tmp_path: Path, nats_server: NatsServer, redis_server: RedisServer
) -> None:
    nats_server.ensure_streams(Settings(subject_prefix="fpt").subjects)
    port, log_path = free_port(), tmp_path / "fleet.log"
    env = cli_environment(
        FLEETPILOT_NATS_URL=nats_server.url,
        FLEETPILOT_REDIS_URL=redis_server.url,
        FLEETPILOT_HTTP_HOST="127.0.0.1",
        FLEETPILOT_HTTP_PORT=str(port),
        FLEETPILOT_SUBJECT_PREFIX="fpt",
        FLEETPILOT_FLEET_TICK_S="1",  # a snapshot a second: messages in and out while it runs
    )
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(FLEETPILOT), "run", "fleet"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: (r := health(port)) is not None and r.status_code == 200, "healthy")
        wait_until(lambda: "started successfully" in log_text(log_path), "FastStream's start line")
        time.sleep(3 * PULL_TIMEOUT_S)  # a few empty pulls: the one ending in TimeoutError logged an ERROR
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=GUARD_S)
    finally:
        if process.poll() is None:
            process.kill()
    text = log_text(log_path)
    assert "FastStream app started successfully" in text  # FastStream's own lines are kept, in our format
    assert "\x1b[" not in text, "colour codes in a log file"
    assert "Traceback" not in text and " ERROR " not in text, text
    assert "is being executed" not in text and " - Received" not in text, text
