"""Free loopback ports for the harnesses' own servers (the rehearsal's Ray, Prometheus and Redis; the e2e's
control plane)."""

from __future__ import annotations

import socket
import time

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before: the kernel's bind(0)
    can return a port twice, and Ray refuses a start whose ports repeat ("make sure the same port is not
    used by multiple components", seen once in CI's dev rehearsal)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def bindable(port: int, host: str = "127.0.0.1", cap: float = 60.0) -> bool:
    """Whether a server can bind the port again within `cap` seconds, as Python's HTTP servers bind
    (SO_REUSEADDR: a closed socket's TIME_WAIT does not count, a live listener does)."""
    end = time.monotonic() + cap
    while True:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
                return True
            except OSError:
                if time.monotonic() > end:
                    return False
        time.sleep(0.5)
