"""`python -m llmclient smoke URL`, `python -m llmclient bench URL [...]`, `python -m llmclient verify URL --stack S
[...]`, `python -m llmclient compare A.json B.json`.
Exit 0 when everything succeeded, 1 when a request failed, 2 on bad usage."""

from __future__ import annotations

import argparse
import asyncio
import json
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
    b = sub.add_parser("bench", help="a bounded load run")
    _common(b)
    b.add_argument("--concurrency", type=int, default=4)
    b.add_argument("--requests", type=int, default=32)
    b.add_argument("--prompt-words", type=int, default=128)
    b.add_argument("--max-tokens", type=int, default=64)
    b.add_argument("--time-cap", type=float, default=300.0, help="the whole run at most, s")
    b.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens (vLLM)")
    b.add_argument("--json", type=Path, help="also write the summary here")
    v = sub.add_parser("verify", help="prove every request's KV moves prefill -> decode (engine metrics)")
    _common(v)
    verify.add_arguments(v)
    c = sub.add_parser("compare", help="saved bench runs side by side, ratios to the first")
    c.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args(argv)

    if args.command == "compare":
        if len(args.runs) < 2:
            parser.error("compare needs two or more saved runs")
        print(bench.compare(args.runs))
        return 0
    if args.command == "verify":
        return verify.main(args)
    if args.command == "smoke":
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
                )
            )
        except smoke.SmokeError as exc:
            print(f"smoke FAILED: {exc}", file=sys.stderr)
            return 1
        print("\n".join(result.lines))
        print("smoke passed")
        return 0
    cfg = bench.BenchConfig(
        url=args.url,
        model=args.model,
        concurrency=args.concurrency,
        requests=args.requests,
        prompt_words=args.prompt_words,
        max_tokens=args.max_tokens,
        time_cap=args.time_cap,
        ignore_eos=args.ignore_eos,
        timeout=args.timeout,
        deadline=args.deadline,
        api_key=args.api_key,
    )
    try:
        summary = asyncio.run(bench.run(cfg))
    except Exception as exc:
        print(f"bench FAILED: {core._error_text(exc)}", file=sys.stderr)
        return 1
    print(bench.table(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"saved {args.json}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
