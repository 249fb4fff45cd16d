"""No engine process has two busy threads bound to the same single core (/proc), idle and under load: the
CPU rehearsal's stall (vLLM's OpenMP thread and the main thread NixlConnector pins, each waiting on the
other). CPU target only."""

from __future__ import annotations

import asyncio

from rehearsal import cpu_threads
from rehearsal.checks import Check, measure_threads
from rehearsal.context import Context, RehearsalFailed, say

IDLE_WINDOW = 5.0  # seconds of CPU sampling with no request in flight, once every replica runs


def idle(ctx: Context) -> None:
    _, busy, _ = measure_threads(ctx.run_id, asyncio.sleep(IDLE_WINDOW))
    ctx.results["threads idle"] = busy


def judge(ctx: Context) -> None:
    for window, key in (("idle", "threads idle"), ("under load", "threads under load")):
        busy = ctx.results.get(key, [])
        for line in cpu_threads.describe(busy):
            say(f"  busy thread ({window}): {line}")
        if pairs := cpu_threads.pinned_pairs(busy):
            raise RehearsalFailed(f"two busy threads of one engine on one core ({window}): {pairs[0]}")


def on_cpu(ctx: Context) -> bool:
    return ctx.cpu_engines


IDLE_THREADS = Check("threads idle", idle, when=on_cpu)
THREADS = Check("threads", judge, when=on_cpu)
