"""Free TCP ports: the one ``free_port`` of the project (services, dashboards, rendezvous, tests).

Asking the kernel for port 0 returns a port from Linux's ephemeral range (32768-60999). That port is free when
asked for, but every other ``bind(0)`` on the machine draws from the same range, and Ray's GCS, raylet, agents
and gRPC servers all do that: a port taken from it could be handed to one of Ray's own listeners before our
server bound it (seen in CI: "Failed to bind to address"). So :func:`free_port` draws at random from
20000-32767 instead: below the ephemeral range and above Ray's worker-port range (10002-19999), where nothing
binds without asking for the number.
"""
from __future__ import annotations

import os
import random
import socket
import time

#: Where :func:`free_port` draws from: outside the ranges the kernel and Ray hand out on their own.
PORT_RANGE = (20000, 32767)
_rng = random.Random(os.getpid() ^ time.time_ns())


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``port`` can be bound on ``host`` now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port(host: str = "127.0.0.1", tries: int = 200) -> int:
    """A TCP port on ``host`` ("" for every interface) that is free now, from :data:`PORT_RANGE`.

    Raises RuntimeError when ``tries`` random ports of the range were all taken.
    """
    for _ in range(tries):
        port = _rng.randint(*PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE} after {tries} tries")
