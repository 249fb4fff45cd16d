"""Checks chosen through ARGS: Ray Serve's per-role autoscaling (`--scale-demo ROLE`) and a short bench
(`--bench FILE`)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from llmclient import bench
from rehearsal import cpu_threads, scale_demo, substitute, topology
from rehearsal.checks import Check, measure_threads
from rehearsal.context import Context, RehearsalFailed, say


def _scale_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scale-demo", metavar="ROLE", help="lower ROLE's target_ongoing_requests, hold streams, see Serve scale it"
    )


def _scale_prepare(plan: substitute.Plan, args: argparse.Namespace) -> list[str]:
    return [substitute.scale_demo(plan.document, args.scale_demo)]


def _scale(ctx: Context) -> None:
    role = ctx.args.scale_demo
    streams = 2 * max(topology.expected_replicas(ctx.document).values())
    work = scale_demo.hold_until_scaled(
        ctx.url, ctx.model, ctx.dashboard, ctx.app, role, streams, ctx.mark, api_key=ctx.api_key
    )
    (start, now), held, _ = measure_threads(ctx.run_id, work)
    for line in cpu_threads.describe(held):
        say(f"  busy thread ({streams} held streams): {line}")
    if pairs := cpu_threads.pinned_pairs(held):
        raise RehearsalFailed(f"two busy threads of one engine on one core (held streams): {pairs[0]}")
    if problems := topology.scaled_alone(start, now, role):
        raise RehearsalFailed(f"scale demo: {'; '.join(problems)} (targets {start} -> {now})")
    wait = scale_demo.wait_running(ctx.dashboard, ctx.app, role, now[role], ctx.mark, ctx.args.ready_timeout)
    if asyncio.run(wait) is None:
        raise RehearsalFailed(f"scale demo: Serve raised {role} to {now[role]} but it did not run in time")


def _bench_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bench", type=Path, help="after the smoke, a short bench saved to this JSON file")


def _bench(ctx: Context) -> None:
    config = bench.BenchConfig(
        url=ctx.url,
        api_key=ctx.api_key,
        concurrency=2,
        requests=8,
        prompt_words=64,
        max_tokens=32,
        time_cap=240,
        ignore_eos=True,
    )
    summary = asyncio.run(bench.run(config))
    say(bench.table(summary))
    ctx.args.bench.write_text(json.dumps(summary, indent=2) + "\n")
    say(f"saved {ctx.args.bench}")
    ctx.results["bench"] = summary
    if summary["failed"]:
        raise RehearsalFailed(f"bench: {summary['failed']} requests failed")


SCALE_DEMO = Check(
    "scale demo",
    _scale,
    selected=lambda args: bool(getattr(args, "scale_demo", None)),
    options=_scale_options,
    prepare=_scale_prepare,
    replicas_added=lambda args: {args.scale_demo: 1},
)
BENCH = Check("bench", _bench, selected=lambda args: bool(getattr(args, "bench", None)), options=_bench_options)
