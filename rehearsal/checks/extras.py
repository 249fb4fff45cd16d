"""Checks chosen through ARGS: Ray Serve's per-role autoscaling (`--scale-demo ROLE`) and `make bench`'s sweep
against the rehearsal (`--bench DIR`)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from llmclient import bench
from measure import bench as bench_stats
from ray_llm_eks.domain.serving.serve_app import parse_document
from rehearsal import cpu_threads, scale_demo, substitute, topology
from rehearsal.checks import Check, by_flag, measure_threads
from rehearsal.context import Context, RehearsalFailed, say


def _scale_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scale-demo", metavar="ROLE", help="lower ROLE's target_ongoing_requests, hold streams, see Serve scale it"
    )


def _scale_prepare(local: substitute.LocalDocument, args: argparse.Namespace) -> list[str]:
    return [substitute.scale_demo(local.document, args.scale_demo)]


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
    parser.add_argument(
        "--bench", type=Path, metavar="DIR", help="after the checks, `make bench`'s sweep (small) into DIR"
    )


def _bench(ctx: Context) -> None:
    """`make bench` against the rehearsal: the stack's SLO and cost, the engines' KV figures, a small sweep."""
    tokenizer = next(iter(parse_document(ctx.document, "rehearsal").roles.values())).model.source
    args = bench.bench_arguments(
        [ctx.url, "--out", str(ctx.args.bench), "--stack", ctx.args.stack, "--label", f"{ctx.args.stack} (CPU)"]
        + ["--model", ctx.model, "--tokenizer", tokenizer, "--isl", "128", "--osl", "32"]
        + ["--requests", "16", "--seconds", "60", "--warmup-requests", "2", "--note", CPU_NOTE]
        + [arg for url in ctx.metrics_urls for arg in ("--metrics-url", url)]
    )
    result = bench.run(args, api_key=ctx.api_key, say=say)
    bench.plot([ctx.args.bench / "bench.json"], ctx.args.bench / "bench.png")
    say(bench_stats.text_table(bench_stats.point_rows(result)))
    ctx.results["bench"] = result.to_json()
    ctx.timeline.append(f"bench: {ctx.args.bench / 'bench.json'}, {ctx.args.bench / 'bench.png'}")
    if failed := sum(p.errors for p in result.points):
        raise RehearsalFailed(f"bench: {failed} requests failed")


SCALE_DEMO = Check(
    "scale demo",
    _scale,
    selected=by_flag("scale_demo"),
    options=_scale_options,
    prepare=_scale_prepare,
    replicas_added=lambda args: {args.scale_demo: 1},
)
CPU_NOTE = "CPU rehearsal (a 2-layer stand-in model on 2 cores): not a GPU verdict"
BENCH = Check("bench", _bench, selected=by_flag("bench"), options=_bench_options)
