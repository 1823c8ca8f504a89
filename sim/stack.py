"""The whole FleetPilot stack as processes on one machine: private nats-server and redis-server, the vast.ai
and Ollama stand-ins, the job system stand-in, and every service via its production entry point.

The demo runs it; the fault-injection suite runs it and breaks parts of it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sim.infra import NatsServer, RedisServer, free_port, wait_for_port

SERVICES = ("demand", "fleet", "provisioner", "decider", "bench")
TRACES_DIR = Path(__file__).resolve().parent / "traces"
DEMO_API_KEY = "demo-key-not-a-secret"
AGENT_FACTORY = "services.decider.agent.agent:create_agent"


@dataclass(frozen=True)
class StackPlan:
    """What to replay and how fast: the full demo is a simulated day in a few minutes."""

    trace: Path
    start_minute: int
    minutes: int
    scale: float
    speed: float
    drain_limit_s: float
    budget_usd_per_h: float
    max_instances: int

    @classmethod
    def full(cls) -> StackPlan:
        # one day of the bundled diurnal trace at 30% of its volume (about 2 to 10 machines), 24 h in ~4 min
        return cls(TRACES_DIR / "diurnal.csv", 0, 24 * 60, 0.3, 360.0, 2 * 3600.0, 20.0, 40)

    @classmethod
    def fast(cls) -> StackPlan:
        # the diurnal morning climb, 06:00-12:00, at 15% volume: 6 h plus draining in well under two minutes
        return cls(TRACES_DIR / "diurnal.csv", 6 * 60, 6 * 60, 0.15, 720.0, 2 * 3600.0, 10.0, 20)


class Stack:
    """Every process of the demo; `close` stops them all (and is safe to call twice)."""

    def __init__(self, plan: StackPlan, workdir: Path) -> None:
        self.plan = plan
        self.workdir = workdir
        self.nats = NatsServer(data_dir=workdir / "nats")
        self.redis = RedisServer(data_dir=workdir / "redis")
        self.ports = {name: free_port() for name in (*SERVICES, "vast", "ollama")}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.sim_epoch = datetime(2026, 3, 2, tzinfo=UTC) + timedelta(minutes=plan.start_minute)
        self.wall_epoch_s = 0.0
        self.job_summary_path = workdir / "jobs-summary.json"

    def env(self, http_port: int | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPILOT_")}
        env.update(
            {
                "FLEETPILOT_NATS_URL": self.nats.url,
                "FLEETPILOT_REDIS_URL": self.redis.url,
                "FLEETPILOT_SUBJECT_PREFIX": "fp",
                "FLEETPILOT_VAST_API_URL": f"http://127.0.0.1:{self.ports['vast']}",
                "FLEETPILOT_VAST_API_KEY": DEMO_API_KEY,
                "FLEETPILOT_OLLAMA_HOST": f"http://127.0.0.1:{self.ports['ollama']}",
                "FLEETPILOT_BUDGET_USD_PER_H": str(self.plan.budget_usd_per_h),
                "FLEETPILOT_MAX_INSTANCES": str(self.plan.max_instances),
                "FLEETPILOT_CLOCK_SPEED": str(self.plan.speed),
                "FLEETPILOT_CLOCK_SIM_EPOCH": self.sim_epoch.isoformat(),
                "FLEETPILOT_CLOCK_WALL_EPOCH_S": repr(self.wall_epoch_s),
                "FLEETPILOT_HTTP_HOST": "127.0.0.1",
                "FLEETPILOT_DECIDER_ADVISOR": AGENT_FACTORY,
            }
        )
        if http_port is not None:
            env["FLEETPILOT_HTTP_PORT"] = str(http_port)
        return env

    def spawn(self, name: str, args: list[str], http_port: int | None = None) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it until it exits
        self.processes[name] = subprocess.Popen(
            [sys.executable, *args], env=self.env(http_port), stdout=log, stderr=subprocess.STDOUT
        )

    def start(self) -> None:
        self.nats.start()
        self.redis.start()
        self.wall_epoch_s = time.time()
        cli = ["-m", "services.cli.main"]
        self.spawn("vast", [*cli, "sim", "vast", "--port", str(self.ports["vast"]), "--speed", str(self.plan.speed)])
        self.spawn("ollama", [*cli, "sim", "ollama", "--port", str(self.ports["ollama"]), "--behaviour", "follow"])
        wait_for_port(self.ports["vast"], 30)
        wait_for_port(self.ports["ollama"], 30)
        for name in SERVICES:
            self.spawn(name, [*cli, "run", name, "--log-level", "warning"], http_port=self.ports[name])
        for name in SERVICES:
            wait_for_port(self.ports[name], 60)

    def start_jobs(self) -> None:
        self.spawn(
            "jobs",
            [
                "-m", "sim.jobs",
                "--trace", str(self.plan.trace),
                "--start-minute", str(self.plan.start_minute),
                "--minutes", str(self.plan.minutes),
                "--scale", str(self.plan.scale),
                "--drain-limit-s", str(self.plan.drain_limit_s),
                "--summary", str(self.job_summary_path),
            ],
        )  # fmt: skip

    def crashed(self) -> list[str]:
        return [name for name, p in self.processes.items() if p.poll() is not None and name != "jobs"]

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 15
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            if process.poll() is None:
                process.kill()
        self.processes.clear()
        self.redis.stop()
        self.nats.stop()

    def now(self) -> datetime:
        return self.sim_epoch + timedelta(seconds=(time.time() - self.wall_epoch_s) * self.plan.speed)
