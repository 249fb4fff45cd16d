"""The smoke: the project's own client (llmclient.smoke) against the endpoint, with Ray's metrics as evidence
that prefill and decode both served; then, for PD, no failed KV read so far (the mistakes' fast path)."""

from __future__ import annotations

import asyncio

from llmclient import smoke
from rehearsal.checks import Check
from rehearsal.checks.topology import check_nixl
from rehearsal.context import Context, say

# A first PD request on 2 busy cores (NIXL handshake, then the transfer) can take tens of seconds.
SMOKE_TIMEOUT = 180.0


def run_smoke(ctx: Context) -> None:
    result = asyncio.run(
        smoke.run(
            ctx.url,
            ctx.model,
            api_key=ctx.api_key,
            timeout=SMOKE_TIMEOUT,
            deadline=SMOKE_TIMEOUT * 2,
            metrics_url=",".join(ctx.metrics_urls),  # every node's: replicas may run on any of them
            expect_pd=ctx.pd,
        )
    )
    for line in result.lines:
        say(f"  smoke: {line}")
    ctx.first_token = result.ttft
    ctx.results["smoke"] = result
    ctx.t_smoke = ctx.mark("smoke passed")
    if ctx.pd:
        check_nixl(ctx.log_dirs)


SMOKE = Check("smoke", run_smoke)
