"""Stopping `fleetpilot up`: a second Ctrl-C while a stuck service holds up the graceful stop ends every
process at once, in one line, with no traceback and nothing left running. Real processes, as a user runs them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.e2e.test_newcomer import WAIT_GUARD_S, UpSession, wait_for

CHILDREN = "/proc/{pid}/task/{pid}/children"
pytestmark = pytest.mark.skipif(not Path(CHILDREN.format(pid=os.getpid())).exists(), reason="needs Linux /proc")


def children_of(pid: int) -> list[int]:
    return [int(child) for child in Path(CHILDREN.format(pid=pid)).read_text().split()]


def alive(pid: int) -> bool:
    """Running or stopped, not gone nor a zombie waiting for its reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")


def test_a_second_ctrl_c_kills_a_stop_held_up_by_a_stuck_service(tmp_path: Path) -> None:
    session = UpSession(tmp_path)
    try:
        session.ready()
        children = children_of(session.process.pid)  # the services, the stand-ins, NATS and Redis
        [provisioner] = [pid for pid in children if " run provisioner " in command_line(pid)]
        os.kill(provisioner, signal.SIGSTOP)  # stuck: it will not answer the SIGTERM of the graceful stop
        session.process.send_signal(signal.SIGINT)
        wait_for(lambda: any(line.startswith("stopping:") for line in session.lines), "the stopping line")
        session.process.send_signal(signal.SIGINT)
        exit_code = session.process.wait(timeout=WAIT_GUARD_S)
    finally:
        session.stop()
    wait_for(lambda: not any(alive(pid) for pid in children), "every service, stand-in, NATS and Redis gone")
    assert exit_code == 0, session.lines
    assert session.lines[-1] == "stopped at once: every process killed", session.lines
    assert not any("Traceback" in line for line in session.lines), session.lines


def ended(session: UpSession, signum: int) -> int:
    """`up` sent `signum` once ready: its exit code, once every process it had started is gone."""
    try:
        session.ready()
        children = children_of(session.process.pid)
        assert len(children) >= 7, [command_line(pid) for pid in children]  # services, stand-ins, NATS, Redis
        session.process.send_signal(signum)
        exit_code = session.process.wait(timeout=WAIT_GUARD_S)
    finally:
        session.stop()
    wait_for(lambda: not any(alive(pid) for pid in children), "every service, stand-in, NATS and Redis gone")
    return exit_code


def test_ctrl_c_stops_up_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A script's `fleetpilot up &` (or a CI job in the background) starts it with SIGINT ignored, which Python
    keeps: Ctrl-C and `kill -INT` did nothing, and a test's stop left three whole stacks running."""
    session = UpSession(tmp_path, sigint_ignored=True)
    assert ended(session, signal.SIGINT) == 0, session.lines


def test_a_killed_up_leaves_nothing_running(tmp_path: Path) -> None:
    """`kill -9` gives `up` no chance to stop its stack: the kernel ends each process with it."""
    assert ended(UpSession(tmp_path), signal.SIGKILL) == -signal.SIGKILL
