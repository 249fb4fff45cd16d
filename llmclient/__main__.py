"""`python -m llmclient smoke URL`, `python -m llmclient bench URL --out DIR [...]`, `python -m llmclient verify
URL --stack S [...]`, `python -m llmclient compare A/bench.json B/bench.json --out compare.png`.
Exit 0 when everything succeeded, 1 when a request failed, 2 on bad usage."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from llmclient import bench, core, smoke, verify


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="base URL of the endpoint, e.g. http://localhost:8000")
    p.add_argument("--model", help="model id (default: the first the endpoint lists)")
    # From the environment by default: a key on the command line shows in `ps` and shell history.
    p.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token (default: $OPENAI_API_KEY)"
    )
    p.add_argument("--timeout", type=float, default=core.DEFAULT_TIMEOUT, help="connect / stall timeout, s")
    p.add_argument("--deadline", type=float, default=core.DEFAULT_DEADLINE, help="one request at most, s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmclient")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("smoke", help="list models, one chat completion, one streamed")
    _common(s)
    s.add_argument("--max-tokens", type=int, default=32)
    s.add_argument("--metrics-url", help="Ray metrics endpoint (Prometheus), for prefill/decode evidence")
    s.add_argument("--expect-pd", action="store_true", help="fail without evidence of prefill and decode")
    s.add_argument("--no-tools", action="store_true", help="skip the tool call (a model served without a parser)")
    b = sub.add_parser("bench", help="a sweep of load points (AIPerf): JSON and a PNG ($OPENAI_API_KEY: the key)")
    bench.add_arguments(b)
    v = sub.add_parser("verify", help="prove every request's KV moves prefill -> decode (engine metrics)")
    _common(v)
    verify.add_arguments(v)
    c = sub.add_parser("compare", help="saved bench runs on one plot, with a verdict table")
    c.add_argument("runs", type=Path, nargs="+", help="bench.json files (or their directories)")
    c.add_argument("--out", type=Path, required=True, help="the PNG to write")
    c.add_argument("--title")
    args = parser.parse_args(argv)
    try:
        core.check_url(getattr(args, "url", None) or "http://compare")
    except core.BadUrl as exc:
        print(f"{args.command} FAILED: {exc}", file=sys.stderr)
        return 2

    if args.command == "compare":
        runs = [r / "bench.json" if r.is_dir() else r for r in args.runs]
        if len(runs) < 2:
            parser.error("compare needs two or more saved runs")
        return bench.main_compare(runs, args.out, args.title)
    if args.command == "bench":
        return bench.main_bench(args)
    if args.command == "verify":
        return verify.main(args)
    try:
        result = asyncio.run(
            smoke.run(
                args.url,
                args.model,
                args.api_key,
                args.timeout,
                args.deadline,
                args.max_tokens,
                args.metrics_url,
                args.expect_pd,
                tools=not args.no_tools,
            )
        )
    except smoke.SmokeError as exc:
        print(f"smoke FAILED: {exc}", file=sys.stderr)
        return 1
    print("\n".join(result.lines))
    print("smoke passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
