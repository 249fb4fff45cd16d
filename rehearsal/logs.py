"""Reading Ray's logs: the engine's own error under Ray's wrappers, a fatal engine start as soon as it is
logged, and lines matching a pattern. Pure file reading (no Ray, no vLLM): `make test` checks it."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from rehearsal.context import say

# Exception lines that only wrap the real error (the engine's own message is logged before them), or Ray's
# own symptoms of it (GetTimeoutError: a replica's call waited on an engine that never came up).
WRAPPERS = re.compile(
    r"Engine core initialization failed|See root cause above|EngineDeadError|RayTaskError|ActorDiedError|"
    r"DeploymentUnavailableError|RayActorError|ActorUnavailableError|failed to start \d+ times|"
    r"KeyboardInterrupt|CancelledError|asyncio\.exceptions|GetTimeoutError"
)
EXC_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b(?:\(\w+\))?:? ?.*)$")
# vLLM's log levels, and whether a line at that level reports an error.
LEVELS = {"ERROR": True, "CRITICAL": True, "WARNING": False, "INFO": False, "DEBUG": False}


def _header(levels) -> str:
    """vLLM's header of a logged line at one of these levels: "ERROR 11-30 14:23:51 [file.py:901]"."""
    return rf"(?:{'|'.join(levels)}) \d\d-\d\d [\d:]+ \[[^\]]+\]"


# Prefixes before a logged line: Ray's "(Worker pid=1) " and vLLM's header at any level.
PREFIXES = re.compile(rf"^(?:\(\w+ pid=\d+[^)]*\) ?)?(?:{_header(LEVELS)} ?)?")
# A traceback vLLM logs below ERROR is not an error: vLLM 0.26 with nixl-cu13 1.3 logs a missing optional
# module's (`nixl_ep_cu13`) import traceback at WARNING (vllm/utils/import_utils.py) on every engine start.
WARNED = re.compile(_header(level for level, error in LEVELS.items() if not error) + " ")
# The headers under which a failure's cause is printed (rehearsal.mistakes looks for them).
ENGINE_HEADER = "ENGINE ERROR (from Ray's logs, root cause first):"
ROLE_HEADER = "KV ROLE ERROR (checked by the rehearsal before deploying: no engine reports it):"
# What vLLM's NIXL connector logs when a KV read fails (nixl/base_worker.py _log_failure).
NIXL_FAILURE = r"NIXL transfer failure: "
# A fatal engine start, as soon as it is logged (Serve itself retries the replica for minutes).
FATAL = re.compile(r"Engine core initialization failed|EngineCore failed to start|Traceback \(most recent call last\)")


def dirs(where: Path | Sequence[Path]) -> list[Path]:
    """Ray's log directories: one, or one per Ray node (each node of a rehearsal has its own temp dir)."""
    return [where] if isinstance(where, Path) else list(where)


def log_files(where: Path | Sequence[Path]) -> list[Path]:
    return [
        p
        for d in dirs(where)
        if d.exists()
        for p in d.rglob("*")
        if p.is_file() and p.suffix in {".err", ".out", ".log"}
    ]


def root_errors(log_dir: Path | Sequence[Path], limit: int = 3) -> list[str]:
    """The distinct exception lines of Ray's logs, wrappers last; each with the file it is in."""
    found: dict[str, tuple[int, str]] = {}
    files = sorted(log_files(log_dir), key=os.path.getmtime)
    for order, path in enumerate(files):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "Error" not in text and "Exception" not in text:
            continue
        raw = text.splitlines()
        lines = [PREFIXES.sub("", line, count=1) for line in raw]
        for i, line in enumerate(lines):
            if "Traceback (most recent call last)" not in line or WARNED.search(raw[i]):
                continue
            # The exception line closes the traceback: the first non-indented line that names one.
            for follow in lines[i + 1 : i + 400]:
                m = EXC_LINE.match(follow)
                if m and not follow.startswith(("  ", "\t")):
                    message = m.group(1).strip()
                    # pydantic and others carry the real reason on the indented lines after it.
                    at = lines.index(follow, i + 1)
                    for more in lines[at + 1 : at + 3]:
                        if not more.startswith(("  ", "\t")) or more.strip().startswith(("File ", "For further")):
                            break
                        message += " | " + more.strip()
                    found.setdefault(message, (order, path.name))
                    break
    # Engines log through Ray's workers (worker-*.out/err); Ray's own daemons come after them (a dashboard
    # port clash on a busy machine is not what failed the rehearsal).
    ranked = sorted(
        found.items(),
        key=lambda kv: (bool(WRAPPERS.search(kv[0])), not kv[1][1].startswith("worker-"), kv[1][0]),
    )
    return [f"{msg}    [{where}]" for msg, (_, where) in ranked[:limit]]


def fatal_logged(log_dir: Path | Sequence[Path]) -> bool:
    """An engine failed to start: Serve would retry the replica for minutes, the error stays the same."""
    for path in [p for d in dirs(log_dir) for p in [*d.glob("worker-*.err"), *d.glob("serve/controller_*.log")]]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "Engine core initialization failed" in text or "Exception in Replica(" in text:
            return True
    return False


def grep_logs(log_dir: Path | Sequence[Path], pattern: str) -> list[str]:
    hits = []
    rx = re.compile(pattern)
    for path in log_files(log_dir):
        try:
            hits += [line.strip() for line in path.read_text(errors="replace").splitlines() if rx.search(line)]
        except OSError:
            continue
    return hits


def report_errors(log_dir: Path | Sequence[Path]) -> None:
    errors = root_errors(log_dir)
    if not errors:
        say(f"(no exception found in Ray's logs at {', '.join(map(str, dirs(log_dir)))})")
        return
    say(ENGINE_HEADER)
    for line in errors:
        say(f"  {line[:1500]}")
