"""`--sweep-bench FILE`: load points (prompt length x requests in flight) through the project's own streaming
client, the quick bench's, for a GPU machine reached only by the wheels of `make gpu-wheels` (no AIPerf there).
Each point: TTFT and TPOT percentiles, output tokens/s, and goodput at the SLO (requests per second whose TTFT
and TPOT both met it; a point meets the SLO when measure/bench.py's ATTAINMENT share of its requests did). Where
the app runs selective PD, each point also says which path its requests took (the ingress's own counter).
`make bench` is the project's bench where AIPerf's venv exists; this one is for comparing apps on one GPU."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from llmclient import core, metrics
from measure import bench, kv_proof, pd_hops
from measure.kv_proof import INF
from ray_llm_eks.domain.telemetry import slo
from rehearsal.checks import Check, by_flag
from rehearsal.checks.quick_bench import load
from rehearsal.context import Context, RehearsalFailed, say
from rehearsal.ray_cluster import METRICS_REPORT_INTERVAL_MS
from rehearsal.routers import percentile

# The ingress counts each request once, by path (ray_llm_eks/serve_ingress/selective_pd.py REQUESTS_METRIC).
PATH_SERIES = "ray_selective_pd_requests_total"
MAX_TOKENS = 128
WARMUP = 8
# The two prompt lengths, in words, that measure how many tokens the served model's tokenizer makes of the
# sweep's words (1.22 per word on Qwen3.5's, 2026-12-02; the CPU rehearsal's stand-in tokenizer differs).
CALIBRATION_WORDS = (100, 500)
# Ray exports each worker's histograms every EXPORT_S here, so a reading right after a point misses its last
# requests: it waits up to three exports for them.
EXPORT_S = METRICS_REPORT_INTERVAL_MS / 1000
SETTLE_S = 3 * EXPORT_S
SETTLE_POLL_S = 0.5


def _numbers(text: str, kind: type) -> tuple:
    try:
        values = tuple(kind(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated {kind.__name__}s") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated {kind.__name__}s above 0")
    return values


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sweep-bench", type=Path, metavar="FILE", help="load points saved to FILE (JSON)")
    parser.add_argument("--sweep-prompts", type=lambda t: _numbers(t, int), default=(256, 1000, 3500),
                        metavar="TOKENS,...", help="prompt lengths of the sweep (default 256,1000,3500)")  # fmt: skip
    parser.add_argument("--sweep-max-tokens", type=int, default=MAX_TOKENS, metavar="N",
                        help=f"output tokens per request (default {MAX_TOKENS}, with ignore_eos)")  # fmt: skip
    parser.add_argument("--sweep-concurrency", type=lambda t: _numbers(t, int), default=(1, 4, 16),
                        metavar="N,...", help="requests in flight per point (default 1,4,16)")  # fmt: skip


def point_figures(results: list[core.RequestResult], seconds: float, target: slo.Slo) -> dict:
    """One load point: latency percentiles, throughput and goodput at `target`."""
    ok = [r for r in results if r.ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    # Time per output token after the first, per request (what vLLM calls TPOT): its mean chunk gap.
    tpot = {id(r): sum(r.itls) / len(r.itls) for r in ok if r.itls}
    good = [
        r
        for r in ok
        if r.ttft is not None and r.ttft <= target.ttft_seconds and tpot.get(id(r), 0.0) <= target.tpot_seconds
    ]
    fraction = len(good) / len(results) if results else None
    return {
        "requests": len(results),
        "failed": len(results) - len(ok),
        "first_error": next((r.error for r in results if not r.ok), None),
        "seconds": round(seconds, 2),
        "prompt_tokens_mean": round(sum(r.prompt_tokens for r in ok) / len(ok), 1) if ok else None,
        "output_tokens_per_s": round(sum(r.output_tokens for r in ok) / seconds, 1) if seconds else None,
        "ttft_ms": {f"p{q}": _ms(percentile(ttft, q)) for q in (50, 95)},
        "tpot_ms": {f"p{q}": _ms(percentile(list(tpot.values()), q)) for q in (50, 95)},
        "goodput_rps": round(len(good) / seconds, 3) if seconds else None,
        "good_fraction": None if fraction is None else round(fraction, 3),
        "meets_slo": fraction is not None and fraction >= bench.ATTAINMENT and len(ok) == len(results),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def words_for(tokens: int, calibration: list[tuple[int, int]]) -> int:
    """Words of the sweep's prompt that make `tokens` prompt tokens: the line through the calibration's
    (words, prompt tokens) readings (chat template and prefix are its intercept)."""
    (w1, t1), (w2, t2) = calibration
    per_word = (t2 - t1) / (w2 - w1)
    if per_word <= 0:
        raise RehearsalFailed(
            f"sweep bench: the calibration's prompts of {w1} and {w2} words counted {t1} and {t2} tokens"
        )
    return max(1, round((tokens - (t1 - per_word * w1)) / per_word))


def _calibrate(ctx: Context) -> list[tuple[int, int]]:
    readings = []
    for words in CALIBRATION_WORDS:
        (result,), _ = asyncio.run(load(ctx, {"concurrency": 1, "prompt_words": words, "max_tokens": 1}, 30_000, 1))
        if not result.ok or not result.prompt_tokens:
            raise RehearsalFailed(f"sweep bench: the calibration request of {words} words failed: {result.error}")
        readings.append((words, result.prompt_tokens))
    return readings


def _paths(ctx: Context) -> dict[str, float]:
    """The ingress's per-path request counts now ({} where the app does not run selective PD)."""
    counts: dict[str, float] = {}
    for sample in metrics.scrape(ctx.metrics_urls, (PATH_SERIES,)):
        path = sample.labels.get("path", "?")
        counts[path] = counts.get(path, 0.0) + sample.value
    return counts


def _role_samples(ctx: Context) -> dict[str, list]:
    """Each engine role's samples of the hop histograms now (measure/pd_hops.py): the plain engines' own, or the
    Ray nodes' endpoints grouped by the role Serve's labels give each worker."""
    names = pd_hops.series()
    try:
        if ctx.role_metrics is not None:
            return ctx.role_metrics(names)
        samples = metrics.scrape(ctx.metrics_urls, [*names, kv_proof.m.SERVE_REPLICA_QUERIES])
    except metrics.MetricsError as exc:  # the figures are extra: the point stands without them
        say(f"    (engine histograms not read: {exc})")
        return {}
    roles = kv_proof.engine_roles(samples)
    by_role: dict[str, list] = {}
    for sample in samples:
        if role := roles.get(sample.labels.get("WorkerId", "")):
            by_role.setdefault(role, []).append(sample)
    return by_role


def _engines_after(ctx: Context, before: dict[str, list], served: int) -> tuple[dict, float | None]:
    """The engines' hop figures for the requests since `before`, once their histograms hold the `served` requests or
    SETTLE_S has passed (plain engines' are current at once); and how many requests the histograms held (None where
    no engine's histograms were read)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = _role_samples(ctx)
        counted = pd_hops.requests_finished(before, after)
        if counted is None or counted >= served or time.monotonic() >= deadline:
            break
        time.sleep(SETTLE_POLL_S)
    exported_by_ray = ctx.role_metrics is None  # plain engines are read directly, current at once
    if counted is not None and counted >= served and exported_by_ray and len(after) > 1:
        # Prefill finished its part of each request before decode did, but its worker exports on a cycle of its own.
        time.sleep(EXPORT_S)
        after = _role_samples(ctx)
        counted = pd_hops.requests_finished(before, after)
    return pd_hops.engine_means(before, after), counted


def _run(ctx: Context) -> None:
    target = slo.default()
    say(f"  sweep: SLO TTFT {target.ttft_ms} ms, TPOT {target.tpot_ms} ms (the slo key's defaults)")
    max_tokens = ctx.args.sweep_max_tokens
    warm = {"concurrency": 4, "prompt_words": 492, "max_tokens": max_tokens}
    before_warm_up = _role_samples(ctx)
    warmed, _ = asyncio.run(load(ctx, warm, 20_000, WARMUP))
    say(f"  sweep warm-up: {sum(r.ok for r in warmed)} of {len(warmed)} requests succeeded")
    calibration = _calibrate(ctx)
    say(f"  sweep calibration: (words, prompt tokens) {calibration}")
    # The warm-up's and the calibration's requests in the histograms before the first point's reading, not in it.
    _engines_after(ctx, before_warm_up, sum(r.ok for r in warmed) + len(calibration))
    points, first = [], 0
    for tokens in ctx.args.sweep_prompts:
        words = words_for(tokens, calibration)
        for concurrency in ctx.args.sweep_concurrency:
            shape = {"concurrency": concurrency, "prompt_words": words, "max_tokens": max_tokens}
            count = max(8, 2 * concurrency)
            before, engines_before = _paths(ctx), _role_samples(ctx)
            if ctx.hops is not None:
                ctx.hops()  # forget the requests before this point
            results, seconds = asyncio.run(load(ctx, shape, first, count))
            first += count
            after = _paths(ctx)
            figures = point_figures(results, seconds, target)
            figures.update(prompt_tokens=tokens, concurrency=concurrency)
            if after:
                figures["paths"] = {p: after[p] - before.get(p, 0.0) for p in sorted(after)}
            # Where each request's time went: the engines' own histograms, and the proxy's hops where it has them.
            served = sum(r.ok for r in results)
            figures["engines"], counted = _engines_after(ctx, engines_before, served)
            if counted is not None and counted != served:  # the figures miss some of its requests, or hold others
                figures["engines_held"] = {"requests": counted, "of": served}
            if ctx.hops is not None:
                figures["hops"] = pd_hops.hop_percentiles(ctx.hops())
            points.append(figures)
            say(f"  sweep {tokens:>5} tokens x {concurrency:>3} in flight: TTFT p50/p95 {figures['ttft_ms']['p50']}/"
                f"{figures['ttft_ms']['p95']} ms, TPOT p50/p95 {figures['tpot_ms']['p50']}/{figures['tpot_ms']['p95']}"
                f" ms, {figures['output_tokens_per_s']} tok/s, goodput {figures['goodput_rps']} req/s"
                f"{' paths ' + str(figures['paths']) if after else ''}")  # fmt: skip
            say(f"    where the time went: {_where(figures)}")
    result = {"slo": {"ttft_ms": target.ttft_ms, "tpot_ms": target.tpot_ms}, "max_tokens": max_tokens,
              "attainment": bench.ATTAINMENT, "calibration": calibration, "points": points}  # fmt: skip
    ctx.args.sweep_bench.write_text(json.dumps(result, indent=2) + "\n")
    ctx.results["sweep bench"] = result
    line = f"sweep bench: {len(points)} points, {sum(p['meets_slo'] for p in points)} met the SLO"
    ctx.mark(line)
    ctx.timeline.append(line)
    if failed := [p for p in points if p["failed"]]:
        raise RehearsalFailed(f"sweep bench: {failed[0]['failed']} requests failed; first: {failed[0]['first_error']}")


HOP_FIGURES = ("queue", "prefill", "kv_transfer", "kv_bytes", "kv_descriptors")


def _where(figures: dict) -> str:
    """One line of a point's hop figures: each role's mean queue, KV transfer time, time per output token by the
    engine's clock and, under Serve, its replicas' event loops' lag (under Ray the bounds its buckets give, not the
    midpoint mean), the proxy's hop p50s."""
    parts = []
    for role, got in sorted(figures.get("engines", {}).items()):
        # A PD prefill engine makes one token a request, which vLLM records as a TPOT of 0.
        names = [*HOP_FIGURES, *(["tpot"] if role != "prefill" else []), *pd_hops.LOOP_FIGURES]
        shown = [f"{name} {_figure(name, got[name])}" for name in names if name in got]
        if shown:
            parts.append(f"{role}: " + ", ".join(shown))
    for hop, q in figures.get("hops", {}).items():
        parts.append(f"{hop} p50 {q['p50']} ms")
    if held := figures.get("engines_held"):
        parts.append(f"(the engines' histograms counted {held['requests']:g} requests for the point's {held['of']})")
    return "; ".join(parts) or "no engine histograms read"


def _figure(name: str, got: dict) -> str:
    """A figure's mean, or under Ray its bounds: times in ms, bytes in binary units."""
    unit = " ms" if name in pd_hops.IN_MS else ""
    if (bounds := got.get("bounds")) is None:
        return f"{got['mean']}{unit}"
    low, high = (INF if b is None else b for b in bounds)
    if name == "kv_bytes":
        return f"{kv_proof.size_text(low)}-{kv_proof.size_text(high)}"
    return f"{low:g}-{'inf' if high == INF else f'{high:g}'}{unit}"


SWEEP_BENCH = Check("sweep bench", _run, selected=by_flag("sweep_bench"), options=_options)
