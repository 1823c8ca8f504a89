"""A port picked now and listened on later is picked below the ephemeral range, where no outgoing connection's
local end can take it meanwhile (a NATS cluster node once failed to start so)."""

from __future__ import annotations

import random
import socket

from shared.processes import ephemeral_port_range, free_port_outside_ephemeral


def test_a_port_for_a_later_listener_is_free_and_below_the_ephemeral_range() -> None:
    low, high = ephemeral_port_range()
    assert 1024 < low < high
    for seed in range(20):
        port = free_port_outside_ephemeral(random.Random(seed))
        assert 1024 < port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # still free: nothing kept it
