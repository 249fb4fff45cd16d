"""The PNG of `make bench` (one run) and `make compare` (several): latency percentiles, goodput and cost against
load, the SLO drawn on each latency panel, and the verdict table under them. Runs in the bench venv
(matplotlib is pinned there beside AIPerf): `python -m llmclient.plot --out X.png A/bench.json [B/bench.json]`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib.pyplot as plt  # no display: the caller sets MPLBACKEND=Agg
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from measure import bench

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
# One run: three percentiles by line style. Several runs: p50 and p95 only, one colour per run.
STYLES = {"p50": ("-", "o", 1.6), "p95": ("--", "s", 1.6), "p99": (":", "^", 1.2)}
PANELS = (
    ("ttft_ms", "Time to first token (ms)", "slo_ttft_ms"),
    ("tpot_ms", "Time per output token (ms)", "slo_tpot_ms"),
    ("e2e_ms", "End-to-end latency (ms)", None),
)


def _loads(run: bench.Run) -> list[float]:
    return [p.load for p in run.points]


def _latency_panel(ax, runs: list[bench.Run], figure: str, title: str, slo_field: str | None) -> None:
    several = len(runs) > 1
    quantiles = ("p50", "p95") if several else ("p50", "p95", "p99")
    for i, run in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        for q in quantiles:
            values = [p.latencies.get(figure, {}).get(q) for p in run.points]
            style, marker, width = STYLES[q]
            label = f"{run.label} {q}" if several else q
            ax.plot(_loads(run), values, style, marker=marker, color=colour, linewidth=width, markersize=4, label=label)
        if slo_field:
            slo = getattr(run, slo_field)
            if i == 0 or slo != getattr(runs[0], slo_field):
                ax.axhline(slo, color="black", linewidth=1, linestyle="-.", alpha=0.7)
                ax.annotate(
                    f"SLO {slo:g} ms",
                    xy=(1, slo),
                    xycoords=("axes fraction", "data"),
                    ha="right",
                    va="bottom",
                    fontsize=8,
                )
    ax.set_title(title, fontsize=10)
    # Latencies and their SLO can span decades: log then, ticked at 1-2-5 with plain numbers.
    shown = [v for line in ax.get_lines() for v in line.get_ydata() if v is not None and v > 0]
    shown += [getattr(run, slo_field) for run in runs] if slo_field else []
    if shown and max(shown) / min(shown) > 10:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left")


def _goodput_panel(ax, runs: list[bench.Run]) -> None:
    for i, run in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        prefix = f"{run.label} " if len(runs) > 1 else ""
        lines = (
            ([p.request_rate for p in run.points], ":", ".", 1.5, "throughput"),
            ([p.goodput for p in run.points], "-", "o", 2.0, "goodput"),
        )
        for values, style, marker, width, name in lines:
            ax.plot(_loads(run), values, style, color=colour, marker=marker, linewidth=width, label=f"{prefix}{name}")
        for p in run.points:
            if p.good_fraction is not None and not p.meets_slo:
                ax.annotate("x", (p.load, p.goodput or 0), color=colour, ha="center", va="center", fontsize=11)
    ax.set_title(f"Requests/s: all vs meeting the SLO (x: <{bench.ATTAINMENT:.0%} good)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left")


def _cost_panel(ax, runs: list[bench.Run]) -> None:
    drawn = False
    for i, run in enumerate(runs):
        values = [p.usd_per_million_output_tokens for p in run.points]
        if any(v is not None for v in values):
            drawn = True
            ax.plot(_loads(run), values, "-", color=COLOURS[i % len(COLOURS)], marker="o", label=run.label)
    if drawn:
        ax.set_title(r"\$ per million output tokens (on-demand \$/h)", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    else:
        ax.set_title(r"\$ per million output tokens: no hourly cost given", fontsize=10)
        ax.text(0.5, 0.5, "run with --stack or --usd-per-hour", ha="center", va="center", transform=ax.transAxes)


def _kv_or_good_panel(ax, runs: list[bench.Run]) -> None:
    kv_runs = [r for r in runs if any(p.kv and p.kv.get("transfers") for p in r.points)]
    if kv_runs:
        for i, run in enumerate(runs):
            if run not in kv_runs:
                continue
            colour = COLOURS[i % len(COLOURS)]
            ms = [(p.kv or {}).get("ms_per_transfer") for p in run.points]
            ax.plot(_loads(run), ms, "-", color=colour, marker="o", label=f"{run.label} ms per transfer")
        ax.set_title("KV transfer (NIXL): time per transfer (ms)", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
        return
    for i, run in enumerate(runs):
        share = [None if p.good_fraction is None else 100 * p.good_fraction for p in run.points]
        ax.plot(_loads(run), share, "-", color=COLOURS[i % len(COLOURS)], marker="o", label=run.label)
    ax.axhline(100 * bench.ATTAINMENT, color="black", linewidth=1, linestyle="-.", alpha=0.7)
    ax.set_title("Requests meeting the SLO (%)", fontsize=10)
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7)


def draw(runs: list[bench.Run], out: Path, title: str | None = None) -> None:
    fig = plt.figure(figsize=(15, 10.5), layout="constrained")
    grid = fig.add_gridspec(3, 3, height_ratios=(1, 1, 0.55))
    axes = [fig.add_subplot(grid[r, c]) for r in range(2) for c in range(3)]
    for ax, (figure, label, slo_field) in zip(axes[:3], PANELS, strict=True):
        _latency_panel(ax, runs, figure, label, slo_field)
    _goodput_panel(axes[3], runs)
    _cost_panel(axes[4], runs)
    _kv_or_good_panel(axes[5], runs)
    unit = runs[0].sweep.unit
    for ax in axes:
        ax.set_xlabel(f"load ({unit})", fontsize=9)
        ax.grid(True, alpha=0.3)
        if runs[0].sweep.kind == "concurrency":
            ax.set_xscale("log", base=2)
        ax.set_xticks(_loads(runs[0]), [f"{x:g}" for x in _loads(runs[0])])
    table = fig.add_subplot(grid[2, :])
    table.axis("off")
    rows = [[cell.replace("$", r"\$") for cell in row] for row in bench.verdict_rows(runs)]
    widths = [0.3] + [0.7 / len(runs)] * len(runs)
    cells = table.table(cellText=rows[1:], colLabels=rows[0], colWidths=widths, loc="center", cellLoc="center")
    cells.auto_set_font_size(False)
    cells.set_fontsize(9)
    cells.scale(1, 1.35)
    for (row, col), cell in cells.get_celld().items():
        if col == 0:
            cell.set_text_props(ha="left")
            cell._loc = "left"
        if row == 0:
            cell.set_text_props(weight="bold")
    headline = title or (" vs ".join(r.label for r in runs) if len(runs) > 1 else f"Benchmark: {runs[0].label}")
    sub = "; ".join(sorted({r.workload.describe() for r in runs}))
    notes = "; ".join(sorted({r.note for r in runs if r.note}))
    slos = "; ".join(
        sorted({f"SLO: TTFT {r.slo_ttft_ms:g} ms, TPOT {r.slo_tpot_ms:g} ms ({r.slo_source})" for r in runs})
    )
    fig.suptitle("\n".join(filter(None, [headline, sub, slos, notes])), fontsize=12)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmclient.plot")
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title")
    args = parser.parse_args(argv)
    runs = [bench.run_from_json(json.loads(p.read_text())) for p in args.runs]
    draw(runs, args.out, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
