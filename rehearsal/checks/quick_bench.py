"""`--quick-bench FILE`: a fixed load through the project's own streaming client (llmclient.core), without
AIPerf's venv (what a GPU machine reached only by the wheels of `make gpu-wheels` can run): a warm-up, then
requests a few at a time with `ignore_eos` (every answer max_tokens long); TTFT, inter-token latency and
output tokens/s, saved to FILE. `make bench` (`--bench DIR`) is the project's bench where its venv exists."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from llmclient import core
from rehearsal.checks import Check, by_flag
from rehearsal.context import Context, RehearsalFailed, say
from rehearsal.routers import percentile

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "prefill",
    "reads",
    "and",
    "decode",
    "writes",
]
# On GPU engines, the reference run's shape (~512-token prompts, 128 output tokens, 4 at a time, after 8 warm-up
# requests: the first requests compile and capture); on CPU engines a short one.
GPU_SHAPE = {"concurrency": 4, "requests": 32, "prompt_words": 492, "max_tokens": 128, "warmup": 8}
CPU_SHAPE = {"concurrency": 2, "requests": 8, "prompt_words": 64, "max_tokens": 32, "warmup": 0}


def prompt(i: int, words: int) -> list[dict]:
    text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))
    return [{"role": "user", "content": f"Request {i}. Repeat after me: {text}"}]


async def load(ctx: Context, shape: dict, first: int, count: int) -> tuple[list[core.RequestResult], float]:
    gate = asyncio.Semaphore(shape["concurrency"])
    # Closed inside its event loop: a client left to the garbage collector closes its connections after
    # asyncio.run has closed the loop, and prints "Event loop is closed" tracebacks.
    async with core.client(ctx.url, ctx.api_key, timeout=300.0) as api:

        async def one(i: int) -> core.RequestResult:
            async with gate:
                return await core.stream_chat(api, ctx.model, prompt(i, shape["prompt_words"]), shape["max_tokens"],
                                              deadline=600.0, extra_body={"ignore_eos": True})  # fmt: skip

        start = time.monotonic()
        results = await asyncio.gather(*(one(first + i) for i in range(count)))
        return list(results), time.monotonic() - start


def summary(results: list[core.RequestResult], seconds: float, shape: dict) -> dict:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [gap for r in ok for gap in r.itls]
    tokens = sum(r.output_tokens for r in ok)
    return {
        "shape": shape,
        "requests": len(results),
        "failed": len(results) - len(ok),
        "first_error": next((r.error for r in results if not r.ok), None),
        "seconds": round(seconds, 2),
        "prompt_tokens_mean": round(sum(r.prompt_tokens for r in ok) / len(ok), 1) if ok else None,
        "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / seconds, 1) if seconds else None,
        "ttft_ms": {q: _ms(percentile(ttft, q)) for q in (50, 95)},
        "itl_ms": {q: _ms(percentile(itl, q)) for q in (50, 95)},
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick-bench", type=Path, metavar="FILE", help="a fixed load with the smoke's client")


def _run(ctx: Context) -> None:
    shape = CPU_SHAPE if ctx.cpu_engines else GPU_SHAPE
    if shape["warmup"]:
        warm, _ = asyncio.run(load(ctx, shape, 10_000, shape["warmup"]))
        say(f"  quick bench warm-up: {sum(r.ok for r in warm)} of {len(warm)} requests succeeded")
    results, seconds = asyncio.run(load(ctx, shape, 0, shape["requests"]))
    figures = summary(results, seconds, shape)
    ctx.args.quick_bench.write_text(json.dumps(figures, indent=2) + "\n")
    ctx.results["quick bench"] = figures
    ttft, itl = figures["ttft_ms"], figures["itl_ms"]
    line = (f"quick bench: {figures['requests']} requests, {shape['concurrency']} at a time, prompt ~"
            f"{figures['prompt_tokens_mean']} tokens, {shape['max_tokens']} out: TTFT p50/p95 {ttft[50]}/{ttft[95]} "
            f"ms, ITL p50/p95 {itl[50]}/{itl[95]} ms, {figures['output_tokens_per_s']} output tokens/s")  # fmt: skip
    ctx.mark(line)
    ctx.timeline.append(line)
    if figures["failed"]:
        raise RehearsalFailed(f"quick bench: {figures['failed']} requests failed; first: {figures['first_error']}")


QUICK_BENCH = Check("quick bench", _run, selected=by_flag("quick_bench"), options=_options)
