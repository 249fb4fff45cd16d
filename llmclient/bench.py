"""A bounded load run against an OpenAI-compatible endpoint: N requests, C at a time, each with a prompt
of about P words and at most M output tokens, the whole run capped in time. Reports TTFT and
inter-token latency percentiles, output tokens/s and errors; saves JSON; compares saved runs."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from llmclient import core

WORDS = "the quick brown fox jumps over the lazy dog while prefill reads and decode writes".split()  # noqa: SIM905


@dataclass(frozen=True)
class BenchConfig:
    url: str
    model: str | None = None
    concurrency: int = 4
    requests: int = 32
    prompt_words: int = 128  # about one token per word for English text
    max_tokens: int = 64
    time_cap: float = 300.0  # seconds for the whole run; unfinished requests count as errors
    ignore_eos: bool = False  # vLLM extension: always produce max_tokens (comparable runs)
    timeout: float = core.DEFAULT_TIMEOUT
    deadline: float = core.DEFAULT_DEADLINE
    api_key: str | None = None


def prompt(i: int, words: int) -> list[dict]:
    text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))
    return [{"role": "user", "content": f"Request {i}. Repeat after me: {text}"}]


def _progress(done: int, total: int, errors: int, stream=sys.stderr) -> None:
    width = 30
    filled = width * done // max(total, 1)
    stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} requests, {errors} errors")
    if done == total:
        stream.write("\n")
    stream.flush()


async def run(cfg: BenchConfig, progress=_progress) -> dict:
    api = core.client(cfg.url, cfg.api_key, cfg.timeout)
    model = cfg.model
    if model is None:
        listed = await asyncio.wait_for(api.models.list(), cfg.deadline)
        if not listed.data:
            raise RuntimeError("the endpoint lists no model")
        model = listed.data[0].id
    extra = {"ignore_eos": True} if cfg.ignore_eos else None
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(cfg.requests):
        queue.put_nowait(i)
    results: list[core.RequestResult] = []
    errors = 0

    async def worker():
        nonlocal errors
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            result = await core.stream_chat(
                api, model, prompt(i, cfg.prompt_words), cfg.max_tokens, cfg.deadline, extra
            )
            results.append(result)
            errors += not result.ok
            if progress:
                progress(len(results), cfg.requests, errors)

    start = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(max(1, min(cfg.concurrency, cfg.requests)))]
    _, pending = await asyncio.wait(tasks, timeout=cfg.time_cap)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - start
    unfinished = cfg.requests - len(results)
    if unfinished and progress:
        sys.stderr.write(f"\ntime cap {cfg.time_cap:g} s reached: {unfinished} requests not finished\n")
    return summarize(cfg, model, results, wall, unfinished)


def summarize(cfg: BenchConfig, model: str, results: list[core.RequestResult], wall: float, unfinished: int) -> dict:
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    itls = [gap for r in ok for gap in r.itls]
    out_tokens = sum(r.output_tokens for r in ok)
    errors: dict[str, int] = {}
    for r in results:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    if unfinished:
        errors["not finished within the time cap"] = unfinished
    return {
        "config": {k: v for k, v in asdict(cfg).items() if k != "api_key"},
        "model": model,
        "requests": cfg.requests,
        "succeeded": len(ok),
        "failed": cfg.requests - len(ok),
        "errors": errors,
        "wall_seconds": wall,
        "output_tokens": out_tokens,
        "output_tokens_per_second": out_tokens / wall if wall > 0 else 0.0,
        "prompt_tokens_mean": (sum(r.prompt_tokens for r in ok) / len(ok)) if ok else None,
        "ttft_seconds": {f"p{q}": core.percentile(ttfts, q) for q in (50, 95, 99)},
        "itl_seconds": {f"p{q}": core.percentile(itls, q) for q in (50, 95, 99)},
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def table(summary: dict) -> str:
    t, i = summary["ttft_seconds"], summary["itl_seconds"]
    rows = [
        ("model", summary["model"]),
        ("requests ok / failed", f"{summary['succeeded']} / {summary['failed']}"),
        ("wall time (s)", f"{summary['wall_seconds']:.2f}"),
        ("output tokens/s", f"{summary['output_tokens_per_second']:.2f}"),
        ("TTFT p50 / p95 / p99 (ms)", f"{_ms(t['p50'])} / {_ms(t['p95'])} / {_ms(t['p99'])}"),
        ("ITL p50 / p95 / p99 (ms)", f"{_ms(i['p50'])} / {_ms(i['p95'])} / {_ms(i['p99'])}"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += [f"error x{count}: {message}" for message, count in summary["errors"].items()]
    return "\n".join(lines)


# Compared metrics: (label, path in the summary, lower is better).
COMPARED = [
    ("output tokens/s", ("output_tokens_per_second",), False),
    ("TTFT p50 (ms)", ("ttft_seconds", "p50"), True),
    ("TTFT p95 (ms)", ("ttft_seconds", "p95"), True),
    ("TTFT p99 (ms)", ("ttft_seconds", "p99"), True),
    ("ITL p50 (ms)", ("itl_seconds", "p50"), True),
    ("ITL p95 (ms)", ("itl_seconds", "p95"), True),
    ("ITL p99 (ms)", ("itl_seconds", "p99"), True),
    ("failed requests", ("failed",), True),
]


def _get(summary: dict, path: tuple[str, ...]):
    value = summary
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def compare(paths: list[Path]) -> str:
    """One table: each saved run's figures, and each run's ratio to the first (the reference)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    names = [Path(p).stem for p in paths]
    header = ["metric", *names, *(f"{n}/{names[0]}" for n in names[1:])]
    lines = [header]
    for label, path, _lower_better in COMPARED:
        values = [_get(r, path) for r in runs]
        scale = 1000 if "(ms)" in label else 1
        shown = ["-" if v is None else f"{v * scale:.2f}" if isinstance(v, float) else str(v) for v in values]
        ratios = []
        for v in values[1:]:
            ref = values[0]
            ratios.append("-" if v is None or not ref else f"{v / ref:.2f}x")
        lines.append([label, *shown, *ratios])
    widths = [max(len(row[c]) for row in lines) for c in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in lines)
