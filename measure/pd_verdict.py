"""The PD verdict from sweep benches of several apps on the same GPU and load (rehearsal --sweep-bench FILE each):
one table of every point side by side (TTFT and TPOT p50/p95, goodput at the SLO, dollars per million output
tokens), the acceptance figures for PD against two collocated replicas, the prompt length from which PD pays,
which is what selective PD's threshold should be, and, given a yardstick (plain vLLM's PD on the same engines), whose
layer holds PD back where ours falls short.

    python -m measure.pd_verdict --pd ours-pd --collocated collocated [--yardstick plain] LABEL=FILE [LABEL=FILE ...]

Every app gets the same dollars an hour: the comparison is at equal hardware (one prefill and one decode node
against two collocated ones), `--usd-per-hour` or NODES x the instance type's on-demand price."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from measure.bench import usd_per_million_tokens
from ray_llm_eks.domain.platform import prices

# What PD must reach at equal hardware to be worth its second hop: TTFT with 16 in flight at most 3x its value
# with 1 (~1,000 prompt tokens); goodput at least 0.8x two collocated replicas' at ~1,000 tokens and at least
# equal at ~3,500.
TTFT_GROWTH_LIMIT = 3.0
TTFT_GROWTH_IN_FLIGHT = 16
GOODPUT_SHARE = {1000: 0.8, 3500: 1.0}


@dataclass(frozen=True)
class App:
    label: str
    points: tuple[Mapping, ...]

    def at(self, tokens: int, in_flight: int) -> Mapping | None:
        return next((p for p in self.points if p["prompt_tokens"] == tokens and p["concurrency"] == in_flight), None)

    def prompt_lengths(self) -> list[int]:
        return sorted({p["prompt_tokens"] for p in self.points})

    def broke_slo(self, tokens: int) -> bool:
        """Whether a point of this prompt length missed the SLO: if none did, its best goodput is the sweep's top,
        not the load at which the SLO stops holding."""
        return any(not p["meets_slo"] for p in self.points if p["prompt_tokens"] == tokens)

    def best_goodput(self, tokens: int) -> float:
        """The most requests a second meeting the SLO at this prompt length, over the points that met it."""
        return max((p["goodput_rps"] or 0.0 for p in self.points if p["prompt_tokens"] == tokens and p["meets_slo"]),
                   default=0.0)  # fmt: skip


def _pair(ms: Mapping) -> str:
    return " / ".join("-" if ms.get(q) is None else f"{ms[q]:,.1f}" for q in ("p50", "p95"))


def table(apps: Sequence[App], usd_per_hour: float | None) -> str:
    """Markdown: one row per prompt length, requests in flight and app."""
    header = ("prompt tokens", "in flight", "app", "TTFT p50 / p95 (ms)", "TPOT p50 / p95 (ms)", "goodput (req/s)",
              "output tokens/s", "$ per million output tokens", "met the SLO")  # fmt: skip
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys = sorted({(p["prompt_tokens"], p["concurrency"]) for a in apps for p in a.points})
    for tokens, in_flight in keys:
        for app in apps:
            if (p := app.at(tokens, in_flight)) is None:
                continue
            usd = usd_per_million_tokens(usd_per_hour, p["output_tokens_per_s"])
            rows.append(f"| {tokens:,} | {in_flight} | {app.label} | {_pair(p['ttft_ms'])} | {_pair(p['tpot_ms'])} | "
                        f"{p['goodput_rps']:.2f} | {p['output_tokens_per_s']:,.1f} | "
                        f"{'-' if usd is None else f'{usd:.3f}'} | {'yes' if p['meets_slo'] else 'no'} |")  # fmt: skip
    return "\n".join(rows)


def nearest(lengths: Sequence[int], tokens: int) -> int | None:
    """The measured prompt length closest to `tokens` (the sweep calibrates words to about these)."""
    return min(lengths, key=lambda n: abs(n - tokens), default=None)


def shared_lengths(*apps: App) -> list[int]:
    """The prompt lengths every one of these apps measured."""
    return sorted(set.intersection(*(set(a.prompt_lengths()) for a in apps)))


def judged(lengths: Sequence[int]) -> list[tuple[int, float]]:
    """The measured lengths nearest the bar's, each with the share of the collocated goodput wanted there."""
    return [(nearest(lengths, wanted), share) for wanted, share in GOODPUT_SHARE.items()]


def findings(pd: App, collocated: App) -> list[str]:
    """The acceptance figures, one line each, and where PD starts to pay."""
    lengths = shared_lengths(pd, collocated)
    if not lengths:
        return [f"no prompt length measured by both {pd.label} and {collocated.label}: nothing to judge"]
    lines = [ttft_growth(pd, nearest(lengths, 1000))]
    for tokens, share in judged(lengths):
        ours, theirs = pd.best_goodput(tokens), collocated.best_goodput(tokens)
        ratio = goodput_share(pd, collocated, tokens)
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        met = ratio is not None and ratio >= share
        lines.append(f"{pd.label}: best goodput at the SLO {ours:.2f} req/s against {collocated.label}'s {theirs:.2f} "
                     f"at {tokens:,} prompt tokens = {shown} (at least {share:g}x wanted): "
                     f"{'met' if met else 'not met'}")  # fmt: skip
    judged_tokens = sorted({tokens for tokens, _ in judged(lengths)})
    unbroken = {a.label: [f"{t:,}" for t in judged_tokens if not a.broke_slo(t)] for a in (pd, collocated)}
    if parts := [f"{label} at {' and '.join(lengths)}" for label, lengths in unbroken.items() if lengths]:
        lines.append(f"every point met the SLO for {'; '.join(parts)} prompt tokens: there the best goodput is a floor "
                     "(the sweep's top), not the SLO's limit; a longer sweep is needed to find it")  # fmt: skip
    ratios = {t: r for t in lengths if (r := goodput_share(pd, collocated, t)) is not None}
    if ratios:
        lines.append(f"{pd.label} against {collocated.label}, best goodput at the SLO by prompt tokens: "
                     + ", ".join(f"{t:,} {r:.2f}x" for t, r in ratios.items()))  # fmt: skip
    # A length where only PD met the SLO is a win; where neither did, no one's.
    wins = [pd.best_goodput(t) > 0 and pd.best_goodput(t) >= collocated.best_goodput(t) for t in lengths]
    lines.append(threshold_finding(lengths, wins))
    return lines


def goodput_share(app: App, collocated: App, tokens: int) -> float | None:
    """The app's best goodput at the SLO as a share of the collocated app's, at this prompt length; none where the
    collocated app met the SLO at no point."""
    theirs = collocated.best_goodput(tokens)
    return app.best_goodput(tokens) / theirs if theirs else None


def against_yardstick(pd: App, yardstick: App, collocated: App) -> list[str]:
    """The bar's other branch: where our PD falls short of its share of the collocated app's goodput, whether
    another PD on the same engines (plain vLLM's) does better against the same collocated app. If it reaches the
    share, the gap is in what ours adds; if it does no better, nothing points there, and what holds PD back lies in
    what both share (the engines, NIXL, the hardware)."""
    lengths = shared_lengths(pd, yardstick, collocated)
    if not lengths:
        return [f"no prompt length measured by {pd.label}, {yardstick.label} and {collocated.label}: no yardstick"]
    lines = []
    for tokens, share in judged(lengths):
        ours, theirs = goodput_share(pd, collocated, tokens), goodput_share(yardstick, collocated, tokens)
        head = f"at {tokens:,} prompt tokens against {collocated.label}'s best goodput at the SLO"
        if not_met := [a.label for a in (collocated, yardstick) if not a.best_goodput(tokens)]:
            lines.append(f"{head}: not judged, {' and '.join(not_met)} met the SLO at no point")
            continue
        if ours >= share:
            verdict = f"{pd.label} met its share, the yardstick is not needed"
        elif theirs >= share:
            verdict = f"{yardstick.label} reaches the share: the gap is in what {pd.label} adds to the same engines"
        elif theirs > ours:
            verdict = (f"{yardstick.label} does better but falls short too: part of the gap is in what {pd.label} "
                       "adds, part in what both share")  # fmt: skip
        else:
            verdict = (f"{yardstick.label} does no better: nothing points at what {pd.label} adds; what holds PD back "
                       "is in what both share")  # fmt: skip
        # Where no point broke the SLO the goodputs are the sweep's top loads, so close shares may be a tie.
        if tops := [a.label for a in (pd, yardstick, collocated) if not a.broke_slo(tokens)]:
            verdict += f" ({', '.join(tops)}: every point met the SLO, so these are the sweep's tops)"
        lines.append(f"{head}: {pd.label} {ours:.2f}x, {yardstick.label} {theirs:.2f}x (at least {share:g}x wanted): "
                     f"{verdict}")  # fmt: skip
    return lines


def ttft_growth(pd: App, tokens: int) -> str:
    """TTFT p50 at TTFT_GROWTH_IN_FLIGHT requests in flight against its value at 1, at this prompt length (and at
    the most requests in flight measured, where the sweep went further)."""
    p50 = {p["concurrency"]: p["ttft_ms"]["p50"] for p in pd.points if p["prompt_tokens"] == tokens}
    wanted = f"{tokens:,} prompt tokens; at most {TTFT_GROWTH_LIMIT:g}x wanted"
    one, judged, most = p50.get(1), p50.get(TTFT_GROWTH_IN_FLIGHT), max(p50)
    if not one or judged is None:
        missing = 1 if not one else TTFT_GROWTH_IN_FLIGHT
        return f"{pd.label}: TTFT growth not judged ({wanted}): no TTFT p50 at {missing} in flight"
    growth = judged / one
    beyond = f"; at {most} in flight {p50[most] / one:.2f}x" if most > TTFT_GROWTH_IN_FLIGHT and p50[most] else ""
    return (f"{pd.label}: TTFT p50 at {TTFT_GROWTH_IN_FLIGHT} in flight is {growth:.2f}x its value at 1 "
            f"({wanted}{beyond}): {'met' if growth <= TTFT_GROWTH_LIMIT else 'not met'}")  # fmt: skip


def threshold_finding(lengths: Sequence[int], wins: Sequence[bool]) -> str:
    """Selective PD's threshold from where PD wins: a threshold keeps the prompts below it on decode alone, so it
    helps only where PD loses below some length and wins at every longer one."""
    # From where PD wins at every longer measured prompt too: one noisy win below a loss sets no threshold.
    first = next((i for i in range(len(lengths)) if all(wins[i:])), None)
    if first == 0:
        return f"PD paid at every measured prompt length, from {lengths[0]:,} tokens: no threshold within the sweep"
    if first is not None:
        return (f"PD pays from {lengths[first]:,} prompt tokens and not at {lengths[first - 1]:,}: selectivePd "
                f"between them ({lengths[first]} is the measured, cautious choice)")  # fmt: skip
    longest = f"{max(lengths, default=0):,}"
    if not any(wins):
        return (
            f"PD paid at no measured prompt length, the longest {longest} tokens included: collocated serving "
            "does better here, and a threshold above it would serve every measured prompt on decode alone"
        )
    paid = ", ".join(f"{t:,}" for t, won in zip(lengths, wins, strict=True) if won)
    return (
        f"PD paid at {paid} prompt tokens but not at the longest measured ({longest}): no length from which it "
        "pays, so no threshold (one would keep the short prompts where PD paid on decode alone)"
    )


def _app(text: str) -> App:
    label, sep, path = text.partition("=")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"{text!r}: LABEL=FILE (a --sweep-bench JSON)")
    try:
        points = json.loads(Path(path).read_text())["points"]
    except (OSError, ValueError, KeyError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: not a sweep bench's JSON ({exc})") from None
    return App(label, tuple(points))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pd_verdict", description=__doc__.splitlines()[0])
    parser.add_argument("apps", nargs="+", type=_app, metavar="LABEL=FILE")
    parser.add_argument("--pd", required=True, help="the label of the PD app judged")
    parser.add_argument("--collocated", required=True, help="the label of the collocated app it is judged against")
    parser.add_argument("--yardstick", help="the label of another PD on the same engines (plain vLLM's), judged "
                        "against the same collocated app where ours falls short")  # fmt: skip
    parser.add_argument("--usd-per-hour", type=float, help="every app's cost (default: NODES x the type's price)")
    parser.add_argument("--instance-type", default="g6.8xlarge")
    parser.add_argument("--region", default="us-east-1", help="whose on-demand price (default us-east-1)")
    parser.add_argument("--nodes", type=int, default=2, help="nodes each app stands for (default 2: 1P1D)")
    args = parser.parse_args(argv)
    by_label = {a.label: a for a in args.apps}
    missing = [label for label in (args.pd, args.collocated, args.yardstick) if label and label not in by_label]
    if missing:
        parser.error(f"{missing[0]}: not one of the labels given ({', '.join(by_label)})")
    if args.yardstick in (args.pd, args.collocated):
        parser.error(f"--yardstick {args.yardstick}: another PD app than --pd and --collocated")
    usd, source = args.usd_per_hour, "--usd-per-hour"
    if usd is None:
        hourly = prices.INSTANCE_USD_PER_HOUR.get(args.region, {}).get(args.instance_type)
        usd = None if hourly is None else args.nodes * hourly
        dated = f"prices of {prices.PRICES_AS_OF.get(args.region, '-')}"
        source = f"{args.nodes} x {args.instance_type} on demand in {args.region}, {dated}" if hourly else (
            f"no price of {args.instance_type} in {args.region}")  # fmt: skip
    print(table(args.apps, usd))
    print(f"\n$ per hour for each app: {'-' if usd is None else f'{usd:.4f}'} ({source})")
    lines = findings(by_label[args.pd], by_label[args.collocated])
    if args.yardstick:
        lines += against_yardstick(by_label[args.pd], by_label[args.yardstick], by_label[args.collocated])
    for line in lines:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
