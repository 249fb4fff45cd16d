"""`make rehearse-mistakes STACK=dev`: each engine-only mistake injected into the stack's PD serve config
must make the rehearsal fail, with an engine error (not a Ray wrapper) printed first in one place; swapped
kv_roles, which no engine reports (vLLM 0.26's NixlConnector serves either way), by the rehearsal's check."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from rehearsal.logs import ENGINE_HEADER, ROLE_HEADER, WRAPPERS
from rehearsal.substitute import MUTATIONS


def check(stack: str, mutation: str, ready_timeout: float) -> tuple[bool, str]:
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rehearsal.run",
            "--stack",
            stack,
            "--mutate",
            mutation,
            "--ready-timeout",
            str(ready_timeout),
        ],
        capture_output=True,
        text=True,
        timeout=ready_timeout + 600,  # Ray start, model, smoke and clean-up on top of the ready cap
    )
    out = proc.stdout.splitlines()
    took = time.monotonic() - start
    if proc.returncode == 0:
        return False, f"{mutation}: the rehearsal PASSED ({took:.0f} s): the mistake went unnoticed"
    header = next((h for h in (ENGINE_HEADER, ROLE_HEADER) if h in out), None)
    if header is None:
        return False, f"{mutation}: failed without an engine error ({took:.0f} s):\n" + "\n".join(out[-15:])
    first = out[out.index(header) + 1].strip()
    if WRAPPERS.search(first):
        return False, f"{mutation}: the first error is a wrapper, not the engine's own: {first}"
    by = "the engine" if header == ENGINE_HEADER else "the rehearsal's own check (no engine message exists)"
    return True, f"{mutation}: failed as it should ({took:.0f} s), caught by {by}: {first[:300]}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="rehearse-mistakes")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--only", action="append", choices=sorted(MUTATIONS))
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    args = parser.parse_args()
    failures = 0
    for mutation in args.only or sorted(MUTATIONS):
        ok, line = check(args.stack, mutation, args.ready_timeout)
        print(("PASS " if ok else "FAIL ") + line, flush=True)
        failures += not ok
    print(f"{len(args.only or MUTATIONS) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
