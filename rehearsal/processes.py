"""The processes of one rehearsal: every one carries the run's marker in its environment, so vLLM's
EngineCore and Worker processes, which outlive `ray stop` re-parented and still hold the NIXL side-channel
ports, are found and ended by PID; and free loopback ports."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

MARKER = "RAY_LLM_EKS_REHEARSAL"  # env var every process of one rehearsal inherits: how we find them


def our_pids(run_id: str) -> list[int]:
    """Every process carrying this rehearsal's marker in its environment (re-parented ones included), and every
    descendant of one: a process that retitles itself (Ray's setproctitle, "ray::DashboardAgent") can blank
    its environment block, so /proc/<pid>/environ no longer shows the marker it inherited."""
    needle = f"{MARKER}={run_id}".encode()
    marked = [pid for pid, env in _environments() if needle in env.split(b"\0")]
    return sorted(set(marked) | set(descendants(marked)))


def _environments() -> list[tuple[int, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                found.append((int(entry.name), (entry / "environ").read_bytes()))
    return found


def descendants(pids: list[int]) -> list[int]:
    """The children of these processes, their children, and so on (from /proc/<pid>/stat's parent field)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The field after the title, which may itself hold spaces and parentheses: "pid (title) state ppid".
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child not in pids:
                found.append(child)
                todo.append(child)
    return found


def end_processes(run_id: str, grace: float = 10.0) -> int:
    pids = our_pids(run_id)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + grace
        while time.monotonic() < end and (pids := our_pids(run_id)):
            time.sleep(0.5)
        if not pids:
            break
    return len(our_pids(run_id))
