"""`make bench URL=...`: a sweep of at least four load points against an OpenAI-compatible endpoint, driven by
AIPerf (llmclient/aiperf.py; its configuration: measure/bench.py), one AIPerf run per point with a warm-up
before the first, fixed seeds and bounded time. Writes DIR/bench.json and DIR/bench.png; `make compare`
puts two such runs on one plot with a verdict table (llmclient/plot.py).

With `--stack` the SLO, the hourly cost and whether the endpoint is PD come from the stack (the one
stack->Settings adapter); `--metrics-url` (Ray's Prometheus endpoint of the engines, repeatable) adds the
NIXL KV transfer figures of each load point."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from llmclient import ROOT, aiperf, core, verify
from llmclient.metrics import MetricsError
from measure import bench as bench_stats
from measure import kv_proof
from ray_llm_eks.adapters.botocore_facts import BotocoreFactsMissing
from ray_llm_eks.adapters.stackfile import StackFileError
from ray_llm_eks.domain.core.errors import ConfigError


def _delta(after: bench_stats.KvFigures, before: bench_stats.KvFigures) -> bench_stats.KvFigures:
    return bench_stats.KvFigures(
        after.transfers - before.transfers, after.megabytes - before.megabytes, after.seconds - before.seconds
    )


def sweep(
    target: bench_stats.Target,
    workload: bench_stats.Workload,
    sweep_: bench_stats.Sweep,
    bounds: bench_stats.Bounds,
    slo: tuple[float, float],
    seed: int,
    out: Path,
    api_key: str | None,
    kv_totals: Callable[[], bench_stats.KvFigures] | None = None,
    usd_per_hour: float | None = None,
    say: Callable[[str], None] = print,
) -> list[bench_stats.Point]:
    """Every load point in order, one AIPerf run each (a warm-up before the first); the KV figures of each
    point are the change of the engines' NIXL totals across it."""
    points = []
    for i, load in enumerate(sweep_.points):
        config = bench_stats.aiperf_config(target, workload, sweep_.kind, load, bounds, *slo, seed, "", warmup=i == 0)
        before = kv_totals() if kv_totals else None
        cap = bounds.worst_case_seconds(1) + 240  # AIPerf's own start and stop, on a busy machine
        result = aiperf.run_point(config, out / f"{sweep_.kind}-{load:g}", api_key, timeout=cap)
        point = bench_stats.read_point(result.summary, load)
        point.usd_per_million_output_tokens = bench_stats.usd_per_million_tokens(
            usd_per_hour, point.output_tokens_per_s
        )
        if kv_totals and before is not None:
            point.kv = _delta(kv_totals(), before).per_transfer()
        points.append(point)
        ttft = point.latencies["ttft_ms"]
        say(
            f"  {sweep_.kind} {load:g}: {point.requests} requests, goodput {point.goodput or 0:.2f}/s "
            f"({100 * (point.good_fraction or 0):.0f}% good), TTFT p95 {ttft['p95'] or 0:.0f} ms, "
            f"{point.errors} errors"
        )
    return points


class EndpointError(RuntimeError):
    """The endpoint could not be asked what it serves (not running, wrong URL, wrong key): one line."""


def served_model(url: str, api_key: str | None, model: str | None = None) -> tuple[str, int | None]:
    """The model to load (`model`, else the first the endpoint lists) and the context it is served with, where
    the endpoint says: vLLM's own server as the model card's max_model_len, Ray Serve LLM 2.58 as its
    metadata.max_request_context_length (its engine_kwargs' max_model_len: openai_api_models.py
    to_model_metadata); None where neither is said."""

    async def listed():
        async with core.client(url, api_key) as api:
            try:
                models = await asyncio.wait_for(api.models.list(), core.DEFAULT_DEADLINE)
            except Exception as exc:  # connection refused, HTTP 401/404, a deadline: said in one line
                raise EndpointError(f"list models at {core.api_base(url)}: {core._error_text(exc)}") from exc
        return models.data

    cards = asyncio.run(listed())
    if not cards:
        raise EndpointError("the endpoint lists no model")
    card = next((c for c in cards if c.id == model), cards[0])
    extra = card.model_extra or {}
    context = extra.get("max_model_len") or (extra.get("metadata") or {}).get("max_request_context_length")
    return model or card.id, context if isinstance(context, int) and context > 0 else None


def stack_facts(stack: str) -> dict:
    """SLO, hourly cost and PD-ness of a stack, through the one stack->Settings adapter."""
    from ray_llm_eks.adapters import stack as stack_adapter
    from ray_llm_eks.domain.stack import cost

    config = stack_adapter.stack_file(stack, ROOT)
    settings = stack_adapter.load_settings(config)
    estimate = cost.estimate(settings, settings.prices)
    view = next(iter(settings.serving.roles.values()))
    tokenizer = bench_stats.stack_tokenizer(view.model_source, view.model_id)
    return {
        "tokenizer": tokenizer,
        "tokenizer_source": f"stack {stack}'s model source" if tokenizer else None,
        "slo": (settings.slo.ttft_ms, settings.slo.tpot_ms),
        "slo_source": f"stack {stack}",
        "usd_per_hour": estimate.usd_per_hour,
        "cost_source": f"stack {stack}, on-demand, {estimate.scope}",
        "pd": settings.serving.serve_document.pd,
        "namespace": settings.serving.namespace,
    }


def default_facts() -> dict:
    from ray_llm_eks.domain.telemetry.slo import default

    slo = default()
    return {
        "tokenizer": None,
        "tokenizer_source": None,
        "slo": (slo.ttft_ms, slo.tpot_ms),
        "slo_source": "the slo key's defaults (no --stack)",
        "usd_per_hour": None,
        "cost_source": "unknown (no --stack or --usd-per-hour)",
        "pd": None,
        "namespace": None,
    }


def plot(json_files: list[Path], png: Path, title: str | None = None) -> None:
    """The PNG, drawn by llmclient/plot.py in the bench venv (matplotlib is pinned there, beside AIPerf)."""
    command = [str(aiperf.executable("python")), "-m", "llmclient.plot", "--out", str(png)]
    command += ["--title", title] if title else []
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    subprocess.run([*command, *map(str, json_files)], check=True, env=env, cwd=ROOT, timeout=300)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="base URL of the endpoint, e.g. http://localhost:8000")
    p.add_argument("--out", type=Path, required=True, help="directory for bench.json, bench.png and AIPerf's files")
    p.add_argument("--stack", help="the stack behind the endpoint: its SLO, hourly cost, PD or not")
    p.add_argument("--label", help="name of this run in plots and tables (default: the stack or the URL)")
    p.add_argument("--sweep", default="concurrency:1,2,4,8", help="concurrency:1,2,4,8 or rate:0.5,1,2,4")
    p.add_argument("--workload", default="fixed", choices=bench_stats.WORKLOADS)
    # Unset: the Workload's defaults, shortened to the endpoint's context where it says what that is.
    p.add_argument("--isl", type=int, help=f"prompt tokens (per user turn; {bench_stats.Workload.isl})")
    p.add_argument("--osl", type=int, help=f"output tokens (per answer; {bench_stats.Workload.osl})")
    p.add_argument("--turns", type=int, help=f"turns per conversation (multiturn; {bench_stats.Workload.turns})")
    p.add_argument("--context-tokens", type=int, help=f"per conversation ({bench_stats.Workload.context_tokens})")
    p.add_argument("--system-tokens", type=int, help=f"shared by all ({bench_stats.Workload.system_tokens})")
    p.add_argument("--dataset", help="your own JSONL (workload dataset)")
    p.add_argument("--dataset-format", default="single_turn", choices=bench_stats.DATASET_FORMATS)
    p.add_argument("--requests", type=int, default=bench_stats.Bounds.requests, help="per load point, at most")
    p.add_argument("--seconds", type=float, default=bench_stats.Bounds.seconds, help="per load point, at most")
    p.add_argument("--warmup-requests", type=int, default=bench_stats.Bounds.warmup_requests)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--model", help="model id (default: the first the endpoint lists)")
    p.add_argument(
        "--tokenizer",
        help="Hugging Face id or local directory (default: the stack's model source with --stack, else the model id)",
    )
    # The KV transfer figures of each point (PD): where the engines' metrics are, as for `make verify`.
    verify.add_metrics_arguments(p)
    p.add_argument("--usd-per-hour", type=float, help="the endpoint's cost per hour (default: the stack's)")
    p.add_argument("--note", default="", help="a line under the plot's title, e.g. 'CPU rehearsal'")


def bench_arguments(argv: list[str]) -> argparse.Namespace:
    """`make bench`'s arguments, for a caller other than the command line (the rehearsal)."""
    parser = argparse.ArgumentParser(prog="bench")
    add_arguments(parser)
    return parser.parse_args(argv)


def run(args: argparse.Namespace, api_key: str | None = None, say: Callable[[str], None] = print) -> bench_stats.Run:
    """The sweep; the key from `api_key` or $OPENAI_API_KEY (never on a command line)."""
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
    given = {field: getattr(args, field) for field in bench_stats.CONTEXT_FIELDS if getattr(args, field) is not None}
    workload = bench_stats.check_workload(
        bench_stats.Workload(
            kind=args.workload,
            dataset=str(Path(args.dataset).resolve()) if args.dataset else None,
            dataset_format=args.dataset_format,
            **given,
        )
    )
    sweep_ = bench_stats.parse_sweep(args.sweep)
    facts = stack_facts(args.stack) if args.stack else default_facts()
    if args.usd_per_hour is not None:
        facts.update(usd_per_hour=args.usd_per_hour, cost_source="--usd-per-hour")
    bounds = replace(
        bench_stats.Bounds(), requests=args.requests, seconds=args.seconds, warmup_requests=args.warmup_requests
    )
    model, context = served_model(args.url, api_key, args.model)
    workload, fitted = bench_stats.fit_to_context(workload, context, set(given))
    if fitted:
        say(fitted)
    tokenizer, tokenizer_source = next(
        (name, source)
        for name, source in (
            (args.tokenizer, "--tokenizer"),
            (facts["tokenizer"], facts["tokenizer_source"]),
            (model, "the model id"),
        )
        if name
    )
    target = bench_stats.Target(args.url, model, tokenizer, api_key=api_key is not None)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    say(
        f"bench {args.url} ({model}, tokenizer {tokenizer} from {tokenizer_source}): {workload.describe()}; "
        f"{sweep_.kind} {list(sweep_.points)}; SLO TTFT "
        f"{facts['slo'][0]:g} ms, TPOT {facts['slo'][1]:g} ms ({facts['slo_source']}); at most "
        f"{bounds.worst_case_seconds(len(sweep_.points)) / 60:.0f} min of load"
    )
    read = verify.kv_reader(args, facts["namespace"])
    kv = (lambda: bench_stats.KvFigures.of(kv_proof.counters(read()))) if read else None
    points = sweep(
        target, workload, sweep_, bounds, facts["slo"], args.seed, out, api_key, kv, facts["usd_per_hour"], say
    )
    result = bench_stats.Run(
        label=args.label or args.stack or args.url,
        url=args.url,
        model=model,
        sweep=sweep_,
        workload=workload,
        slo_ttft_ms=facts["slo"][0],
        slo_tpot_ms=facts["slo"][1],
        slo_source=facts["slo_source"],
        usd_per_hour=facts["usd_per_hour"],
        cost_source=facts["cost_source"],
        pd=facts["pd"],
        seed=args.seed,
        points=points,
        note=args.note,
    )
    (out / "bench.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return result


def main_bench(args: argparse.Namespace) -> int:
    try:
        result = run(args)
        plot([args.out / "bench.json"], args.out / "bench.png")
    except (
        ConfigError,
        StackFileError,
        BotocoreFactsMissing,
        verify.VerifyError,
        aiperf.AiperfFailed,
        MetricsError,
        EndpointError,
    ) as exc:
        print(f"bench FAILED: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, (aiperf.AiperfFailed, MetricsError, EndpointError)) else 2
    print(bench_stats.text_table(bench_stats.point_rows(result)))
    print()
    print(bench_stats.text_table(bench_stats.verdict_rows([result])))
    print(f"saved {args.out / 'bench.json'} and {args.out / 'bench.png'}")
    return 1 if any(p.errors for p in result.points) else 0


def main_compare(runs: list[Path], png: Path, title: str | None = None) -> int:
    """Two (or more) saved runs: one plot, one verdict table."""
    loaded = [bench_stats.run_from_json(json.loads(Path(p).read_text())) for p in runs]
    plot(list(runs), png, title)
    print(bench_stats.text_table(bench_stats.verdict_rows(loaded)))
    print(f"saved {png}")
    return 0
