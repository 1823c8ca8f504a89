"""A helper started with `ended_with_parent` goes when its parent is killed outright, as llama-server must."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from shared.processes import ended_with_parent

pytestmark = pytest.mark.skipif(ended_with_parent() is None, reason="the parent-death signal is Linux's")

PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from shared.processes import ended_with_parent
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn={hook})
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie the init process has not reaped yet is gone for our purpose
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def child_after_parent_killed(hook: str) -> int:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(hook=hook)], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": "."}
    )
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    return child_pid


def test_a_child_started_with_the_hook_ends_when_its_parent_is_killed() -> None:
    child_pid = child_after_parent_killed("ended_with_parent()")
    deadline = time.monotonic() + 10
    while alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child_pid)


def test_without_it_the_child_is_left_running() -> None:
    # the defect the hook mends: the same parent without it orphans its child
    child_pid = child_after_parent_killed("None")
    try:
        time.sleep(0.5)
        assert alive(child_pid)
    finally:
        os.kill(child_pid, signal.SIGKILL)
