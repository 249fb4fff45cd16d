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
    """Every process carrying this rehearsal's marker in its environment (re-parented ones included)."""
    needle = f"{MARKER}={run_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


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
