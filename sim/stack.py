"""The whole FleetPilot stack as processes on one machine: private nats-server and redis-server, the vast.ai
and Ollama stand-ins, the job system stand-in, and every service via its production entry point.

The demo runs it; the fault-injection suite runs it and breaks parts of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared.clock import ClockControl
from shared.processes import ended_with_parent, free_port, serves_on, stop_process
from shared.streams import DEFAULT_COMMAND_TTL_S
from sim.clock_governor import ClockGovernor
from sim.infra import NatsCluster, NatsServer, RedisServer

SERVICES = ("demand", "fleet", "provisioner", "decider", "bench")
TRACES_DIR = Path(__file__).resolve().parent / "traces"
DEMO_API_KEY = "demo-key-not-a-secret"
BENCH_REPORT_TOKEN = "demo-bench-token-not-a-secret"
AGENT_FACTORY = "services.decider.agent.agent:create_agent"
# A governed stack's clock runs this fast while the processes start (imports, connections: seconds of CPU on a
# busy machine), and at the plan's speed from the first task on: starting up costs no simulated hours.
STARTUP_SPEED = 30.0
# a service's stop waits up to FastStream's 10 s graceful timeout for handlers in flight (shared/bus.py); past
# that it is stuck, and is killed: its unacknowledged command comes back to the next provisioner by its key
SERVICE_STOP_GRACE_S = 11.0
# the stand-ins, NATS and Redis have no work in flight once their callers are gone; they stop in well under 1 s
STAND_IN_STOP_GRACE_S = 5.0


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
    """Every process of the demo; `close` stops them all (and is safe to call twice).

    The fault suite also kills, restarts and re-configures single processes: `kill` (SIGKILL, as in a crash),
    `restart` (same command, port and log, with extra environment or a shifted clock if asked).
    """

    def __init__(
        self,
        plan: StackPlan,
        workdir: Path,
        *,
        api_key: str = DEMO_API_KEY,
        process_env: dict[str, dict[str, str]] | None = None,
        vast_scenario: Path | None = None,
        log_level: str = "warning",
        nats_nodes: int = 1,
        governed: bool = False,
        ends_with_starter: bool = False,
    ) -> None:
        """`governed`: the clock slows while the processes wait for a CPU or fall behind on their messages (the
        demo; see sim/clock_governor.py); otherwise it runs at the plan's speed throughout, as the fault suite's
        wall-time windows expect.
        `ends_with_starter`: every process gets SIGTERM from the kernel when the thread that started it ends,
        however it ends (`fleetpilot up`, whose start and restarts run on its main thread: a `kill -9` of it left
        a whole stack running)."""
        self.plan = plan
        self.governed = governed
        self.clock_path = workdir / "clock"
        self.clock: ClockControl | None = None
        self.governor: ClockGovernor | None = None
        self.jobs_started_at: datetime | None = None  # on the stack's clock: the trace is replayed from here
        self.workdir = workdir
        self.api_key = api_key
        self.vast_scenario = vast_scenario
        self.log_level = log_level
        # one nats-server, or a JetStream cluster on loopback whose streams keep three replicas
        self.nats: NatsServer | NatsCluster = (
            NatsServer(data_dir=workdir / "nats") if nats_nodes == 1 else NatsCluster(workdir, nats_nodes)
        )
        self.stream_replicas = min(nats_nodes, 3)
        self.redis = RedisServer(data_dir=workdir / "redis")
        self.ends_with_starter = ends_with_starter
        for server in self.servers():
            server.ends_with_starter = ends_with_starter
        self.ports = {name: free_port() for name in (*SERVICES, "vast", "ollama")}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[list[str], int | None]] = {}
        # per process: extra FLEETPILOT_* settings, and how far its clock runs ahead of the shared epoch
        self.process_env: dict[str, dict[str, str]] = {k: dict(v) for k, v in (process_env or {}).items()}
        self.clock_offsets_s: dict[str, float] = {}
        self.sim_epoch = datetime(2026, 3, 2, tzinfo=UTC) + timedelta(minutes=plan.start_minute)
        self.wall_epoch_s = 0.0
        self.job_summary_path = workdir / "jobs-summary.json"
        self.log_offsets: dict[str, int] = {}

    def env(self, http_port: int | None = None, name: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPILOT_")}
        sim_epoch = self.sim_epoch + timedelta(seconds=self.clock_offsets_s.get(name or "", 0.0))
        env.update(
            {
                "FLEETPILOT_NATS_URL": self.nats.url,
                "FLEETPILOT_REDIS_URL": self.redis.url,
                "FLEETPILOT_SUBJECT_PREFIX": "fp",
                "FLEETPILOT_VAST_API_URL": f"http://127.0.0.1:{self.ports['vast']}",
                "FLEETPILOT_VAST_API_KEY": self.api_key,
                "FLEETPILOT_OLLAMA_HOST": f"http://127.0.0.1:{self.ports['ollama']}",
                "FLEETPILOT_BUDGET_USD_PER_H": str(self.plan.budget_usd_per_h),
                "FLEETPILOT_MAX_INSTANCES": str(self.plan.max_instances),
                "FLEETPILOT_CLOCK_SPEED": str(self.plan.speed),
                "FLEETPILOT_CLOCK_SIM_EPOCH": sim_epoch.isoformat(),
                "FLEETPILOT_CLOCK_WALL_EPOCH_S": repr(self.wall_epoch_s),
                # every process reads the one clock the stack (and its governor) writes
                "FLEETPILOT_CLOCK_CONTROL_FILE": str(self.clock_path),
                "FLEETPILOT_CLOCK_OFFSET_S": repr(self.clock_offsets_s.get(name or "", 0.0)),
                "FLEETPILOT_HTTP_HOST": "127.0.0.1",
                "FLEETPILOT_DECIDER_ADVISOR": AGENT_FACTORY,
                "FLEETPILOT_BENCH_REPORT_TOKEN": BENCH_REPORT_TOKEN,
                # the stand-in machines have no GPU and run the suite's CPU variant: judged on correctness alone
                "FLEETPILOT_BENCH_CPU_REPORTS": "correctness_only",
                # where the rented machines' onstart fetches the suite and reports (the job stand-in runs it)
                "FLEETPILOT_PROVISIONER_BENCH_URL": f"http://127.0.0.1:{self.ports['bench']}",
                # the simulated hosts report the catalog's CUDA (12.4 for Ampere/Ada); no image runs on them, so
                # the default image's 12.8 floor would only narrow the demo's market to the Blackwell cards
                "FLEETPILOT_PROVISIONER_MIN_CUDA": "12.4",
                "FLEETPILOT_DECIDER_MODE": "live",  # against the vast.ai stand-in; shadow is the default elsewhere
                # a command's expiry is on the scaled clock, the provisioner's work on vast's stand-in takes wall
                # time: at 360x the default 300 s would expire a launch queued behind another within a second
                "FLEETPILOT_DECIDER_COMMAND_TTL_S": repr(DEFAULT_COMMAND_TTL_S * self.plan.speed),
            }
        )
        if http_port is not None:
            env["FLEETPILOT_HTTP_PORT"] = str(http_port)
        env.update(self.process_env.get(name or "", {}))
        return env

    def spawn(self, name: str, args: list[str], http_port: int | None = None) -> None:
        self.commands[name] = (args, http_port)
        log_path = self.workdir / f"{name}.log"
        self.log_offsets[name] = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:  # appended to across restarts
            # its own process group: a Ctrl-C at the terminal reaches only the parent, which stops the callers
            # before what they call (close), instead of every process at once
            self.processes[name] = subprocess.Popen(
                [sys.executable, *args],
                env=self.env(http_port, name),
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                preexec_fn=ended_with_parent() if self.ends_with_starter else None,
            )

    def start(self) -> None:
        self.nats.start()
        self.redis.start()
        self.wall_epoch_s = time.time()
        speed = min(self.plan.speed, STARTUP_SPEED) if self.governed else self.plan.speed
        self.clock = ClockControl.create(self.clock_path, self.sim_epoch, self.wall_epoch_s, speed)
        if self.governed:
            self.governor = ClockGovernor(
                self.clock, self.plan.speed, self.pids, self.workdir / "clock.log", self.nats.consumer_backlog
            )
        cli = ["-m", "services.cli.main"]
        self.ensure_streams(cli)
        vast = [*cli, "sim", "vast", "--port", str(self.ports["vast"]), "--speed", str(self.plan.speed)]
        if self.vast_scenario is not None:
            vast += ["--scenario", str(self.vast_scenario)]
        self.spawn("vast", [*vast, "--log-level", "info"])  # its log: each rental, state change and destroy
        self.spawn("ollama", [*cli, "sim", "ollama", "--port", str(self.ports["ollama"]), "--behaviour", "follow"])
        self.wait_serving("vast", 30)
        self.wait_serving("ollama", 30)
        for name in SERVICES:
            self.spawn(name, [*cli, "run", name, "--log-level", self.log_level], http_port=self.ports[name])
        for name in SERVICES:
            self.wait_serving(name, 60)

    def wait_serving(self, name: str, timeout_s: float) -> None:
        """Until `name` itself listens on its port. A free port can be taken by another process before ours binds
        it (other test sessions share the machine): then it starts again on a new port, which `ports` records."""
        deadline = time.monotonic() + timeout_s
        while True:
            process, port = self.processes[name], self.port_of(name)
            if serves_on(process.pid, port):
                return
            if process.poll() is not None:
                since_spawn = (self.workdir / f"{name}.log").read_bytes()[self.log_offsets.get(name, 0) :]
                log = since_spawn.decode(errors="replace")
                if "address already in use" not in log.lower():
                    raise RuntimeError(f"{name} exited with {process.returncode} while starting: {log[-2000:]}")
                self.move_to_new_port(name, port)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} is not listening on 127.0.0.1:{port} after {timeout_s}s")
            time.sleep(0.05)

    def port_of(self, name: str) -> int:
        args, http_port = self.commands[name]
        return http_port if http_port is not None else int(args[args.index("--port") + 1])

    def move_to_new_port(self, name: str, taken: int) -> None:
        args, http_port = self.commands[name]
        port = free_port()
        if http_port is None:
            args = [str(port) if a == str(taken) and args[i - 1] == "--port" else a for i, a in enumerate(args)]
        else:
            http_port = port
        self.ports[name] = port
        self.spawn(name, args, http_port)

    def ensure_streams(self, cli: list[str]) -> None:
        """The admin step, as a deployment runs it before its services: `fleetpilot streams ensure`, one shot."""
        command = [sys.executable, *cli, "streams", "ensure", "--replicas", str(self.stream_replicas)]
        with open(self.workdir / "streams.log", "ab") as log:
            done = subprocess.run(command, env=self.env(), stdout=log, stderr=subprocess.STDOUT, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"`fleetpilot streams ensure` failed: {(self.workdir / 'streams.log').read_text()}")

    def pids(self) -> list[int]:
        """Every process of the stack that is running: the services, the stand-ins, nats-server and redis-server."""
        return [p.pid for p in [*self.processes.values(), *self.server_processes()] if p.poll() is None]

    def start_jobs(self) -> None:
        if self.governor is not None:
            self.governor.start()  # the plan's speed from the first task on, governed
        self.jobs_started_at = self.now()
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
                "--bench-report-url", f"http://127.0.0.1:{self.ports['bench']}/bench/report",
            ],
        )  # fmt: skip

    def kill(self, name: str) -> None:
        """SIGKILL: no shutdown hooks, no final checkpoint, as in a crash or an OOM kill."""
        process = self.processes[name]
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()

    def stop(self, name: str, timeout_s: float = 15.0) -> None:
        """SIGTERM and wait (the graceful path), SIGKILL if it does not go."""
        stop_process(self.processes[name], timeout_s)

    def restart(
        self,
        name: str,
        *,
        env: dict[str, str] | None = None,
        clock_offset_s: float | None = None,
        wait_s: float = 60.0,
    ) -> None:
        """Stop `name` if it still runs, then start it again with the same command (and port).

        `env` adds FLEETPILOT_* settings from now on; `clock_offset_s` moves its clock that far ahead of the
        shared epoch (a clock that jumped), the other processes' clocks staying where they are.
        """
        self.stop(name)
        if env is not None:
            self.process_env.setdefault(name, {}).update(env)
        if clock_offset_s is not None:
            self.clock_offsets_s[name] = clock_offset_s
        args, http_port = self.commands[name]
        self.spawn(name, args, http_port)
        if wait_s > 0 and (http_port is not None or "--port" in args):
            self.wait_serving(name, wait_s)

    def restart_all(self, names: list[str], *, clock_offset_s: float | None = None, wait_s: float = 60.0) -> None:
        """`restart` for several processes at once: all stop, then all start (a host rebooting, a clock stepping)."""
        for name in names:
            if self.processes[name].poll() is None:
                self.processes[name].terminate()
        for name in names:
            self.stop(name)
            if clock_offset_s is not None:
                self.clock_offsets_s[name] = clock_offset_s
        for name in names:
            args, http_port = self.commands[name]
            self.spawn(name, args, http_port)
        for name in names:
            args, http_port = self.commands[name]
            if wait_s > 0 and (http_port is not None or "--port" in args):
                self.wait_serving(name, wait_s)

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    def crashed(self) -> list[str]:
        return [name for name, p in self.processes.items() if p.poll() is not None and name != "jobs"]

    def close(self) -> None:
        """Every process stopped, within SERVICE_STOP_GRACE_S + STAND_IN_STOP_GRACE_S at worst: the services (and
        the job stand-in) together first, then the stand-ins they call with NATS and Redis together, each group
        SIGKILLed past its grace."""
        # a provisioner whose vast.ai went first spent its last 15 s retrying into the log: callers go first
        if self.governor is not None:
            self.governor.stop()
        callers = [p for name, p in self.processes.items() if name in (*SERVICES, "jobs")]
        called = [p for name, p in self.processes.items() if name not in (*SERVICES, "jobs")]
        stop_together(callers, SERVICE_STOP_GRACE_S)
        stop_together([*called, *self.server_processes()], STAND_IN_STOP_GRACE_S)
        self.processes.clear()
        self.redis.stop()  # already stopped: forgets the process
        self.nats.stop()

    def kill_all(self) -> None:
        """SIGKILL to every process at once: a second Ctrl-C, when a person will not wait for a graceful stop."""
        stop_together([*self.processes.values(), *self.server_processes()], 0.0)
        self.processes.clear()
        self.redis.stop()
        self.nats.stop()

    def servers(self) -> list[RedisServer | NatsServer]:
        """Redis and every NATS node."""
        return [self.redis, *(self.nats.nodes if isinstance(self.nats, NatsCluster) else [self.nats])]

    def server_processes(self) -> list[subprocess.Popen[bytes]]:
        return [server.process for server in self.servers() if server.process is not None]

    def now(self) -> datetime:
        if self.clock is None:
            return self.sim_epoch
        return datetime.fromtimestamp(self.clock.sim_s(time.time()), UTC)

    def sim_at(self, wall_s: float) -> datetime:
        """The simulated moment at a past wall time (exact while the speed did not change since)."""
        if self.clock is None:
            return self.sim_epoch
        if self.governor is not None:
            return datetime.fromtimestamp(self.governor.sim_at(wall_s), UTC)
        return datetime.fromtimestamp(self.clock.sim_s(wall_s), UTC)


def stop_together(processes: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM to all at once, then one shared deadline: stopping takes the slowest one's time, not the sum."""
    for process in processes:
        if process.poll() is not None:
            continue
        if grace_s > 0:
            process.terminate()
        else:
            process.kill()
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        if process.poll() is None:
            process.kill()
            process.wait()
