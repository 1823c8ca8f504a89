"""Child processes and local ports: a free port, a process stopped gracefully, whether a process serves a port.

For whatever starts servers of its own: the simulators and test fixtures (sim/infra.py), the local model runtime.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def ephemeral_port_range() -> tuple[int, int]:
    """The ports the kernel hands out as the local end of outgoing connections (Linux's default otherwise)."""
    try:
        low, high = (int(part) for part in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


_handed_out: set[int] = set()


def free_port(rng: random.Random | None = None, attempts: int = 200) -> int:
    """A free port for a listener that binds it later, never the same one twice in this process.

    Drawn below the ephemeral range: a port the kernel hands out (bind to 0) can be taken meanwhile as the local
    end of some outgoing connection (a NATS node dialling its peers took a peer's route port so), and two draws
    in a row can return the same port (a nats-server was given one port for clients and monitoring, and could
    not start). A port drawn here is outside that range and remembered; another process may still bind it first,
    which a server's start notices (sim/infra.py waits for the server's own process to listen)."""
    low, _ = ephemeral_port_range()
    draw = rng or random.SystemRandom()
    for _ in range(attempts):
        port = draw.randint(max(1025, low // 2), max(1026, low - 1))
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError(f"no free port below {low} after {attempts} draws")


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


def wait_for_port(port: int, timeout_s: float = 10.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Something listens on `port`; given the `process` that should, that process itself, and a ProcessLookupError
    as soon as it has exited (a server that could not bind is not waited for, nor mistaken for whoever holds
    the port)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ProcessLookupError(f"the process for 127.0.0.1:{port} exited with {process.returncode}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0 and (process is None or serves_on(process.pid, port)):
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


def listening_sockets(port: int) -> set[str]:
    """`socket:[inode]` of every socket listening on `port` on this host (Linux's /proc/net tables)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    found.add(f"socket:[{fields[9]}]")
    return found


def serves_on(pid: int, port: int) -> bool:
    """Whether process `pid` itself listens on `port`, not another that took the port between `free_port` and the
    bind (other test sessions on a shared machine do); without /proc, whether anything listens there."""
    if not Path("/proc/net/tcp").exists():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0
    wanted = listening_sockets(port)
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
    return False


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def ended_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel SIGTERM the child when the thread that started it ends, however it
    ends (SIGKILL included), so a heavy helper such as llama-server is never left running on its own; None
    where there is no such call (not Linux). Start the child from a thread that lives as long as the parent."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)  # loaded before the fork

    def set_parent_death_signal() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return set_parent_death_signal
