"""Free loopback ports for the harnesses' own servers (the rehearsal's Ray, Prometheus and Redis; the e2e's
control plane)."""

from __future__ import annotations

import socket

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
