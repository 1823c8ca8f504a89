"""A port picked now and listened on later is picked below the ephemeral range, where no outgoing connection's
local end can take it meanwhile (a NATS cluster node once failed to start so), and is never handed out twice
(a nats-server was once given the same port for clients and for monitoring, and could not start)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from shared import processes
from shared.processes import ephemeral_port_range, free_port
from sim.infra import RedisServer


def test_a_port_for_a_later_listener_is_free_and_below_the_ephemeral_range() -> None:
    low, high = ephemeral_port_range()
    assert 1024 < low < high
    for seed in range(20):
        port = free_port(random.Random(seed))
        assert 1024 < port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # still free: nothing kept it


def test_the_same_port_is_never_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_handed_out", set())
    # the same seed draws the same sequence: without the memory of what was handed out, the ports would repeat
    first = [free_port(random.Random(7)) for _ in range(50)]
    assert len(set(first)) == 50


def test_a_port_taken_by_a_listener_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_handed_out", set())  # the port is refused for being taken, not remembered
    seed = 11
    expected = random.Random(seed).randint(ephemeral_port_range()[0] // 2, ephemeral_port_range()[0] - 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        try:
            holder.bind(("127.0.0.1", expected))
        except OSError:
            pytest.skip(f"port {expected} is busy on this host already")
        holder.listen()
        assert free_port(random.Random(seed)) != expected


def test_a_server_whose_port_someone_else_holds_fails_with_its_log_instead_of_seeming_up(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = RedisServer(port=holder.getsockname()[1], data_dir=tmp_path)
        with pytest.raises(RuntimeError, match="redis did not start"):
            server.start()  # something answers on the port, but not the server: not taken for it
        assert not server.running
