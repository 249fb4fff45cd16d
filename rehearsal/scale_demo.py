"""`make rehearse ARGS="--scale-demo decode"`: Ray Serve's per-role autoscaling for real. With the role's
target_ongoing_requests lowered (a printed substitution), hold long streamed requests until Serve raises
THAT role's target replicas, check no other role's target moved, then wait for the new replica to run."""

from __future__ import annotations

import asyncio
import time

from llmclient import core
from rehearsal import topology, verify

# Serve decides from ongoing requests averaged over look_back_period_s (30 s) and acts after upscale_delay_s
# (30 s) (ray/serve/config.py AutoscalingConfig defaults): a minute or two of held streams.
DECISION_CAP = 240.0
MAX_TOKENS = 2048  # with ignore_eos, minutes per stream on this CPU; prompt + this stays within max_model_len


async def hold_until_scaled(
    url: str, model: str, dashboard: str, app: str, role: str, streams: int, mark, api_key: str | None = None
):
    """Hold `streams` long streamed requests until Serve's targets move (or DECISION_CAP), then cancel them.
    Returns (targets at start, targets at the end). `mark(text) -> seconds` prints a timeline line."""
    async with core.client(url, api_key, timeout=300.0) as api:
        start = topology.targets(verify.application(dashboard, app))
        mark(f"scale demo: targets {start}; holding {streams} streams for {role}")
        long = {"ignore_eos": True}
        held = [
            asyncio.create_task(core.stream_chat(api, model, verify.PROMPT, MAX_TOKENS, DECISION_CAP + 60, long))
            for _ in range(streams)
        ]
        t0 = time.monotonic()
        now = start
        try:
            while time.monotonic() - t0 < DECISION_CAP:
                await asyncio.sleep(2.0)
                now = topology.targets(verify.application(dashboard, app))
                if now != start:
                    break
        finally:
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
    mark(f"scale demo: targets {now} after {time.monotonic() - t0:.0f} s of held streams (streams cancelled)")
    return start, now


async def wait_running(dashboard: str, app: str, role: str, replicas: int, mark, cap: float) -> float | None:
    """Seconds since the rehearsal's start when `role` runs `replicas` RUNNING replicas; None after `cap` s."""
    end = time.monotonic() + cap
    while time.monotonic() < end:
        running = topology.running_replicas(verify.application(dashboard, app))
        if len(running.get(role, [])) >= replicas:
            return mark(f"scale demo: {role} runs {len(running[role])} replicas")
        await asyncio.sleep(2.0)
    return None
