"""The checks a rehearsal runs, in order, on the SAME running engines, once the application runs.

A check is a function of the run's Context (rehearsal.context): it raises RehearsalFailed (or
llmclient.smoke.SmokeError) with one line of why, and leaves what it found on the context for later checks
and the closing timeline. To add one: write it in a module of this package and put it in CHECKS where it
belongs; `selected` and `options` give it its own ARGS (`make rehearse STACK=dev ARGS="--faults"`),
`prepare` lets it change the document before deploy (each change printed)."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from rehearsal import cpu_threads
from rehearsal.context import Context, RehearsalFailed
from rehearsal.processes import our_pids
from rehearsal.substitute import LocalDocument


def _always(_) -> bool:
    return True


def by_flag(dest: str) -> Callable[[argparse.Namespace], bool]:
    """`selected` for a check that its own ARGS flag turns on (`dest`: the flag's attribute, e.g. "kv_fault")."""
    return lambda args: bool(getattr(args, dest, None))


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Context], None]
    # Decided on the running engines (PD only, tensor parallel only, one target only).
    when: Callable[[Context], bool] = _always
    # Chosen by ARGS: an extra check reads its own flag here (default: every run).
    selected: Callable[[argparse.Namespace], bool] = _always
    # The ARGS it adds to the parser.
    options: Callable[[argparse.ArgumentParser], None] | None = None
    # Its changes to the document before deploy: the printed lines (ValueError: refused in one line).
    prepare: Callable[[LocalDocument, argparse.Namespace], list[str]] | None = None
    # Replicas it will add while running (role -> count): Ray is given CPUs for them.
    replicas_added: Callable[[argparse.Namespace], dict[str, int]] | None = None
    # The Ray nodes it needs instead of the default ones (args, nodes, run id, run dir) -> nodes: the head
    # fault puts the engines on a second node.
    nodes: Callable | None = None
    # Its failure does not stop the engines serving (e.g. figures against a prediction): the later checks
    # still run on them, and the run fails at the end naming it.
    defer: bool = False


def measure_threads(run_id: str, work) -> tuple:
    """Run the coroutine `work`, sampling this rehearsal's threads around it: (its result, busy threads,
    CPU seconds per process)."""
    before, start = cpu_threads.sample(our_pids(run_id)), time.monotonic()
    result = asyncio.run(work)
    after = cpu_threads.sample(our_pids(run_id))
    elapsed = time.monotonic() - start
    return result, cpu_threads.busy(before, after, elapsed), cpu_threads.process_seconds(before, after)


def all_checks() -> list[Check]:
    """Every check, in the order they run (imported here so that each module may import this one)."""
    from rehearsal.checks import (
        engines,
        extras,
        faults,
        gate,
        observability,
        quick_bench,
        routing,
        smoke,
        sweep_bench,
        threads,
        topology,
    )

    return [
        topology.REPLICAS,
        observability.PROMETHEUS,  # from here on, it scrapes every request
        engines.MEMORY,
        threads.IDLE_THREADS,
        smoke.SMOKE,
        gate.GATE,  # the key gate on the real replica, before the requests that follow
        topology.EVERY_REPLICA,
        threads.THREADS,
        topology.TP_RANKS,
        topology.KV_READS,
        engines.KV_BUFFERS,
        observability.VERIFY,
        observability.QUERIES,  # right after verify's requests: the panels' rate windows hold them
        routing.PREFIX_OVER_NIXL,
        routing.COMPARE_ROUTERS,
        extras.SCALE_DEMO,
        extras.BENCH,
        quick_bench.QUICK_BENCH,
        sweep_bench.SWEEP_BENCH,
        faults.FAULTS_CHECK,  # restarts engines and the head
        observability.KV_FAULT,  # last: it breaks the KV path for good
    ]


def add_options(parser: argparse.ArgumentParser, checks: list[Check]) -> None:
    for check in checks:
        if check.options is not None:
            check.options(parser)


def selected(checks: list[Check], args: argparse.Namespace) -> list[Check]:
    return [check for check in checks if check.selected(args)]


def run_all(ctx: Context, checks: list[Check]) -> list[str]:
    """Run the checks in order; returns the failures of deferred checks (one line each)."""
    deferred = []
    for check in checks:
        if not check.when(ctx):
            continue
        try:
            check.run(ctx)
        except RehearsalFailed as exc:
            if not check.defer:
                if deferred:  # the failures that came first still lead the line
                    raise RehearsalFailed("; ".join([*deferred, f"{check.name}: {exc}"])) from exc
                raise
            ctx.mark(f"check '{check.name}' FAILED, the other checks go on: {str(exc)[:300]}")
            deferred.append(f"{check.name}: {exc}")
    return deferred
