"""`fleetpilot up`: the whole stack on this machine, for trying FleetPilot by hand.

A private nats-server and redis-server, the vast.ai and Ollama stand-ins and every service, each on its own
free port, on a fast clock; it prints the variables that point `fleetpilot status`, `publish`, `ask`, `dlq` and
`audit tail` at it, and runs until Ctrl-C (services stop before the stand-ins they call).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shlex
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import typer

from services.cli.errors import UserMistake
from services.cli.up_watch import MAX_RESTARTS, LogFollower, progress_lines, read_spend, tail

if TYPE_CHECKING:  # the stack is imported when it starts: `fleetpilot up --help` needs none of it
    from shared.contract.audit import DeciderMode
    from sim.stack import Stack

# 60 simulated seconds per wall second: a machine's ~10 min start-up takes 10 s, an hour of demand one minute,
# and the decider's 5 min heartbeat comes every 5 s. Slow enough to read `fleetpilot status` as it changes.
DEFAULT_SPEED = 60.0


def client_environment(stack: Stack) -> dict[str, str]:
    """Every setting the stack's services run with (not their own HTTP ports), so that a terminal that sources
    it talks to the same bus and clock, and `fleetpilot config --effective` there shows what the stack enforces."""
    return {name: value for name, value in stack.env().items() if name.startswith("FLEETPILOT_")}


def exports(environment: dict[str, str]) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in environment.items())


WORKDIR_LOCK = ".fleetpilot-up.lock"


@contextlib.contextmanager
def holding_workdir(directory: Path) -> Iterator[IO[str]]:
    """The workdir to one stack at a time: two would share one NATS store and Redis file and overwrite each
    other's logs and fleetpilot.env. The lock dies with its process, so a crashed stack leaves none behind."""
    lock = open(directory / WORKDIR_LOCK, "a+")  # noqa: SIM115 (held open for the whole run)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise UserMistake(
                f"--workdir {directory}: a stack already runs there (fleetpilot up, pid {holder}); stop it with "
                "Ctrl-C in its terminal, or choose another --workdir"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield lock
    finally:
        lock.close()


def up(
    speed: float = typer.Option(DEFAULT_SPEED, min=1.0, help="simulated seconds per wall second (1 = real time)"),
    budget_usd_per_h: float = typer.Option(10.0, min=0.01, help="the fleet's budget, $/h"),
    max_instances: int = typer.Option(20, min=1, help="most instances at once"),
    mode: str = typer.Option(
        "live", help="live: the decider's commands reach the vast.ai stand-in; shadow: decided and audited, not sent"
    ),
    workdir: Path = typer.Option(None, help="where logs and data go (default: a new temporary directory)"),
) -> None:
    """Start NATS, Redis, the vast.ai and Ollama stand-ins and every service locally; Ctrl-C stops them all."""
    if mode not in ("live", "shadow"):
        raise UserMistake(f"--mode {mode!r}: expected live or shadow")
    decider_mode: DeciderMode = "live" if mode == "live" else "shadow"
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    directory = workdir or Path(tempfile.mkdtemp(prefix="fleetpilot-up-"))
    with holding_workdir(directory):
        run_stack(directory, speed, budget_usd_per_h, max_instances, decider_mode)


def run_stack(
    directory: Path, speed: float, budget_usd_per_h: float, max_instances: int, decider_mode: DeciderMode
) -> None:
    """The stack in `directory` until Ctrl-C or SIGTERM; a service that stops early ends it (exit 1)."""
    from sim.stack import SERVICES, Stack, StackPlan

    plan = dataclasses.replace(StackPlan.full(), speed=speed, budget_usd_per_h=budget_usd_per_h)
    plan = dataclasses.replace(plan, max_instances=max_instances)
    mode_env = {"FLEETPILOT_DECIDER_MODE": decider_mode}
    process_env: dict[str, dict[str, str]] = {name: dict(mode_env) for name in SERVICES}
    stack = Stack(plan, directory, process_env=process_env, log_level="info", ends_with_starter=True)
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    # Ctrl-C stops the stack even when `up` was started with SIGINT ignored (a script's `fleetpilot up &`, a CI
    # job in the background), which Python would otherwise keep: Ctrl-C and `kill -INT` did nothing at all
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        typer.echo(f"starting in {directory} (x{speed:g} clock, budget ${budget_usd_per_h:g}/h, {decider_mode})")
        stack.start()
        environment = {**client_environment(stack), **mode_env}
        env_file = directory / "fleetpilot.env"
        env_file.write_text(exports(environment))
        for name in (*SERVICES, "vast", "ollama"):
            typer.echo(f"  {name:<12} http://127.0.0.1:{stack.ports[name]}  (log: {directory / f'{name}.log'})")
        typer.echo(f"  nats         {stack.nats.url}\n  redis        {stack.redis.url}")
        typer.echo(f"\nIn another terminal:  source {env_file}")
        typer.echo("then: fleetpilot status, fleetpilot publish queue default=40, fleetpilot audit tail -f, ...")
        typer.echo("\nready; Ctrl-C stops everything")
        watch(stack, stopping)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop(stack)
        signal.signal(signal.SIGINT, previous_int)


def watch(stack: Stack, stopping: threading.Event) -> None:
    """Until Ctrl-C or SIGTERM: say each carried-out launch, stop and destroy with the spend it leaves, and
    restart a service that exits (its log tail said first), up to MAX_RESTARTS times each."""
    provisioner_log = LogFollower(stack.workdir / "provisioner.log")
    provisioner_log.skip_to_end()
    metrics_url = f"http://127.0.0.1:{stack.ports['provisioner']}/metrics"
    restarts: dict[str, int] = {}
    while not stopping.wait(0.5):
        if lines := progress_lines(provisioner_log.new_text()):
            spend = read_spend(metrics_url)
            for line in lines:
                typer.echo(f"  {line}")
            if spend:
                typer.echo(f"  {spend}")
        for name in stack.crashed():
            restart_crashed(stack, name, restarts)


def restart_crashed(stack: Stack, name: str, restarts: dict[str, int]) -> None:
    """A crashed service's last log lines, then the service again; past MAX_RESTARTS the stack stops (exit 1)."""
    code = stack.processes[name].returncode
    log_path = stack.workdir / f"{name}.log"
    typer.echo(f"{name} exited with code {code}; the end of {log_path}:", err=True)
    for line in tail(log_path.read_text(errors="replace") if log_path.exists() else ""):
        typer.echo(f"  | {line}", err=True)
    restarts[name] = restarts.get(name, 0) + 1
    if restarts[name] > MAX_RESTARTS:
        typer.echo(f"stopped early: {name} crashed {MAX_RESTARTS + 1} times (its log above)", err=True)
        raise typer.Exit(1)
    typer.echo(f"restarting {name} ({restarts[name]} of {MAX_RESTARTS})", err=True)
    with contextlib.suppress(RuntimeError, TimeoutError):  # it failed again while starting: the next look says so
        stack.restart(name)


def stop(stack: Stack) -> None:
    """Graceful and bounded (Stack.close); a second Ctrl-C while it runs kills every process at once."""
    typer.echo("stopping: services first, then the stand-ins, NATS and Redis (Ctrl-C again: at once)", err=True)
    try:
        stack.close()
    except KeyboardInterrupt:
        stack.kill_all()
        typer.echo("stopped at once: every process killed", err=True)
