"""Which threads of the rehearsal burn CPU, and on which cores they may run, read from /proc. The hazard it
looks for is the PD stall: two busy threads of ONE engine process bound to the same single core (vLLM's
OpenMP thread and the main thread NixlConnector pins, each waiting on the other: ~60 s per forward pass).
Threads of different engines sharing a core only take turns; that is reported, not refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# A thread using more than this share of one core over the window counts as busy (the UCX progress thread
# polls at ~17% of a core, measured on the 2-core rehearsal machine: below it).
BUSY_SHARE = 0.25


@dataclass(frozen=True)
class ThreadSample:
    pid: int
    tid: int
    process: str  # the process's title (vLLM's setproctitle, e.g. VLLM::Worker_TP1; comm cuts it at 15 chars)
    thread: str
    ticks: int  # utime + stime, in clock ticks
    cpus: frozenset[int]  # the cores it may run on (Cpus_allowed_list)


def parse_cpu_list(text: str) -> frozenset[int]:
    """`0-2,5` -> {0, 1, 2, 5} (the kernel's list format)."""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)


def _ticks(stat: str) -> int:
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3 of proc(5)
    return int(fields[11]) + int(fields[12])  # utime (14), stime (15)


def sample(pids: list[int], proc: Path = Path("/proc")) -> dict[tuple[int, int], ThreadSample]:
    """Every thread of these processes now; processes or threads that end meanwhile are skipped."""
    found = {}
    for pid in pids:
        try:
            title = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            process = title.split()[0] if title.strip() else (proc / str(pid) / "comm").read_text().strip()
            tids = [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            task = proc / str(pid) / "task" / str(tid)
            try:
                ticks = _ticks((task / "stat").read_text())
                status = (task / "status").read_text()
                thread = (task / "comm").read_text().strip()
            except (OSError, ValueError):
                continue
            allowed = next((ln.split(":", 1)[1] for ln in status.splitlines() if ln.startswith("Cpus_allowed_l")), "")
            found[(pid, tid)] = ThreadSample(pid, tid, process, thread, ticks, parse_cpu_list(allowed))
    return found


def busy(
    before: dict[tuple[int, int], ThreadSample],
    after: dict[tuple[int, int], ThreadSample],
    seconds: float,
    hz: int | None = None,
    share: float = BUSY_SHARE,
) -> list[tuple[ThreadSample, float]]:
    """Threads that used more than `share` of one core between the two samples, busiest first."""
    hz = hz or os.sysconf("SC_CLK_TCK")
    out = []
    for key, now in after.items():
        used = (now.ticks - before[key].ticks) / hz / seconds if key in before else 0.0
        if used > share:
            out.append((now, used))
    return sorted(out, key=lambda item: -item[1])


def process_seconds(
    before: dict[tuple[int, int], ThreadSample], after: dict[tuple[int, int], ThreadSample], hz: int | None = None
) -> dict[str, float]:
    """process title (with its pid) -> CPU seconds its threads used between the two samples."""
    hz = hz or os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for key, now in after.items():
        name = f"{now.process} (pid {now.pid})"
        used[name] = used.get(name, 0.0) + (now.ticks - before[key].ticks if key in before else 0) / hz
    return used


def pinned_pairs(busy_threads: list[tuple[ThreadSample, float]]) -> list[str]:
    """The PD stall's cause: one process with two or more busy threads bound to the same single core."""
    groups: dict[tuple[int, int], list[tuple[ThreadSample, float]]] = {}
    for thread, used in busy_threads:
        if len(thread.cpus) == 1:
            groups.setdefault((thread.pid, next(iter(thread.cpus))), []).append((thread, used))
    return [
        f"{threads[0][0].process} (pid {pid}): {len(threads)} busy threads bound to core {core} only: "
        + ", ".join(f"{t.thread}/{t.tid} {used:.0%}" for t, used in threads)
        for (pid, core), threads in sorted(groups.items())
        if len(threads) > 1
    ]


def describe(busy_threads: list[tuple[ThreadSample, float]], limit: int = 8) -> list[str]:
    """One line per busy thread: process, thread, share of a core, the cores it may use."""
    return [
        f"{t.process}/{t.thread} (pid {t.pid}, tid {t.tid}): {used:.0%} of a core, "
        f"cores {','.join(map(str, sorted(t.cpus)))}"
        for t, used in busy_threads[:limit]
    ]
