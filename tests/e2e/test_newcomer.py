"""The README's newcomer path, followed as it is written: the two commands (the fast demo: `make test` is this
suite), "Run it yourself" with `fleetpilot up`, then "First day on a real account" in shadow mode against the
vast.ai stand-in. Every command runs as a user runs it: the installed `fleetpilot`, in its own process."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.conftest import FLEETPILOT, cli_environment
from tests.e2e.conftest import DemoRun

README = Path(__file__).resolve().parents[2] / "README.md"
MAKEFILE = README.parent / "Makefile"
# hang guards for the waits below, never speed requirements
START_GUARD_S = 240.0
WAIT_GUARD_S = 120.0


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def commands_in(markdown: str) -> list[str]:
    """The shell lines of a section's ```sh blocks, without their comments."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, re.S):
        lines += [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
    return lines


def wait_for(check: Callable[[], object], what: str, guard_s: float = WAIT_GUARD_S) -> object:
    deadline = time.monotonic() + guard_s
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {guard_s:.0f}s: {what}")
        time.sleep(0.5)
    return found


class UpSession:
    """`fleetpilot up` in its own process; its printed lines collected as they come."""

    def __init__(self, workdir: Path, *args: str, sigint_ignored: bool = False) -> None:
        """`sigint_ignored`: started as a non-interactive shell starts a background job (`fleetpilot up &`)."""
        self.workdir = workdir
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [str(FLEETPILOT), "up", "--workdir", str(workdir), *args],
            env=cli_environment(),
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def ready(self) -> None:
        def started() -> bool:
            assert self.process.poll() is None, "\n".join(self.lines)
            return any(line.startswith("ready;") for line in self.lines)

        wait_for(started, "fleetpilot up ready", START_GUARD_S)

    def environment(self) -> dict[str, str]:
        """What `source fleetpilot.env` puts in a shell, as the README says to."""
        [sourced] = [line for line in self.lines if "source " in line]
        env_file = Path(sourced.split("source ", 1)[1].strip())
        assert env_file == self.workdir / "fleetpilot.env"
        exported = {}
        for line in env_file.read_text().splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            exported[name] = shlex.split(value)[0]
        return exported

    def stop(self) -> int:
        """Ctrl-C, as the README says."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=WAIT_GUARD_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def fleetpilot(line: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A README line run as written (`fleetpilot ...`), in the environment the README sets up."""
    args = shlex.split(line)
    assert args[0] == "fleetpilot", line
    return subprocess.run(
        [str(FLEETPILOT), *args[1:]], env=cli_environment(**env), cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def up_session(tmp_path: Path) -> Iterator[Callable[..., UpSession]]:
    sessions: list[UpSession] = []

    def start(*args: str) -> UpSession:
        session = UpSession(tmp_path / f"up-{len(sessions)}", *args)
        sessions.append(session)
        return session

    for path in (tmp_path / "up-0", tmp_path / "up-1"):
        path.mkdir()
    yield start
    for session in sessions:
        session.stop()


def test_the_two_commands_run_the_demo_whose_checks_pass(fast_demo: DemoRun) -> None:
    two = section("Two commands on a fresh machine")
    assert commands_in(two)[:2] == ["make demo", "make test"]
    assert 'make demo ARGS="--fast"' in two
    assert "\t$(BIN)/fleetpilot demo $(ARGS)" in MAKEFILE.read_text()  # what the fixture runs, without make
    said = " ".join(fast_demo.output.split())  # the console wraps the verdict at its width
    assert "✓ work done (wait p95 ≤ 90 min" in said and "budget held, no dead letters" in said


def test_run_it_yourself_then_a_first_day_in_shadow_mode(up_session: Callable[..., UpSession], tmp_path: Path) -> None:
    yourself = commands_in(section("Run it yourself"))
    assert yourself[:2] == ["source .venv/bin/activate", "fleetpilot up"]
    source_line, *terminal_lines = yourself[2:]
    assert source_line.startswith("source ") and source_line.endswith("/fleetpilot.env")

    live = up_session()
    live.ready()
    env = live.environment()
    results = {line: fleetpilot(line.replace("audit tail -f", "audit tail"), env, tmp_path) for line in terminal_lines}
    for line, done in results.items():
        assert done.returncode == 0, (line, done.stdout, done.stderr)
    assert "published QueueSnapshot" in results["fleetpilot publish queue default=40"].stdout
    assert "no dead letters" in results["fleetpilot dlq list"].stderr

    def rented() -> bool:
        snapshot = json.loads(fleetpilot("fleetpilot status --json", env, tmp_path).stdout or "{}")
        return bool(snapshot.get("instances"))

    wait_for(rented, "a machine rented on the stand-in for the 40 waiting tasks")
    assert live.stop() == 0
    assert live.lines[-1].startswith("stopping: services first")
    logs = {path.name: path.read_text(errors="replace") for path in live.workdir.glob("*.log")}
    assert "rented offer" in logs["vast.log"], logs["vast.log"]  # the stand-in's log says what it rented
    for name, text in logs.items():  # a normal start and stop: plain lines, nothing alarming
        assert "\x1b[" not in text and "Traceback" not in text and " ERROR " not in text, (name, text[-3000:])

    first_day = section("First day on a real account")
    assert "`FLEETPILOT_DECIDER_MODE=shadow`, the default" in first_day
    assert "fleetpilot up --mode shadow" in first_day
    checks = [line for line in commands_in(first_day) if line.startswith("fleetpilot config")]
    assert checks == ["fleetpilot config --check", "fleetpilot config --effective"]

    shadow = up_session("--mode", "shadow")
    shadow.ready()
    env = shadow.environment()
    for line in checks:
        done = fleetpilot(line, {**env, "FLEETPILOT_VAST_API_KEY": "a-real-key-would-go-here"}, tmp_path)
        assert done.returncode == 0, (line, done.stderr)
    assert fleetpilot("fleetpilot publish queue default=40", env, tmp_path).returncode == 0

    def withheld() -> list[dict[str, object]]:
        audit = fleetpilot("fleetpilot audit tail --json -n 50", env, tmp_path).stdout.splitlines()
        records = [json.loads(line) for line in audit]
        return [r for r in records if r["mode"] == "shadow" and r["commands_withheld"]]

    [record, *_] = wait_for(withheld, "a shadow decision that withheld a launch")  # type: ignore[misc]
    assert record["commands_sent"] == []
    ledger = httpx.get(f"{env['FLEETPILOT_VAST_API_URL']}/_sim/ledger", timeout=10).json()
    assert ledger["entries"] == [], "shadow mode rented a machine"
    assert json.loads(fleetpilot("fleetpilot status --json", env, tmp_path).stdout)["instances"] == []
    assert shadow.stop() == 0
