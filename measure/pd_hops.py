"""Where a prefill/decode request's time goes, per load point: the engines' own histograms (vLLM 0.26's request and
NIXL metrics) read before and after the point, and, where a proxy of ours times them, each request's hops. Plain
data in, figures out; the sweep bench (rehearsal/checks/sweep_bench.py) gathers the readings.

Which hop grows with the requests in flight is where they queue: decode's queue time holds its wait for the KV
(vLLM records a request's SCHEDULED event only once its remote KV has arrived: v1/core/sched/scheduler.py), and
the NIXL transfer time runs from the read's post until the engine saw it done (nixl/stats.py), so transfers that
wait for each other show there. Under Ray the histograms' sums are bucket midpoints (measure/kv_proof.py): there
the figures are the bounds the buckets the events landed in give (a queue of 2 ms and one of 290 ms both read
0-300 ms in vLLM's first queue bucket), and a midpoint mean is only their middle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from measure.kv_proof import INF, Sample, add_bucket, edge_sums, landed
from ray_llm_eks.domain.telemetry import ray_metrics as m

# vLLM 0.26's histograms as `vllm serve` exports them (v1/metrics/loggers.py, kv_connector/v1/nixl/stats.py);
# Ray Serve LLM exports each as ray_vllm_<name> (vllm/v1/metrics/ray_wrappers.py: ':' -> '_', Ray's prefix).
HISTOGRAMS = {
    "queue": "vllm:request_queue_time_seconds",  # arrival -> running (decode: includes the KV wait)
    "prefill": "vllm:request_prefill_time_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    # By the engine core's clock, which stamps each step's outputs (v1/engine/__init__.py EngineCoreOutputs,
    # v1/metrics/stats.py): a frontend whose event loop lags does not lengthen them, as it does e2e.
    "tpot": "vllm:request_time_per_output_token_seconds",
    "decode": "vllm:request_decode_time_seconds",  # first token -> last
    "kv_transfer": "vllm:nixl_xfer_time_seconds",  # post -> done, per transfer (decode reads)
    "kv_post": "vllm:nixl_post_time_seconds",
    "kv_bytes": "vllm:nixl_bytes_transferred",
    "kv_descriptors": "vllm:nixl_num_descriptors",
}
# Figures in seconds shown in ms; the others as they are.
SECONDS = {"queue", "prefill", "ttft", "e2e", "tpot", "decode", "kv_transfer", "kv_post"}
# How late each event loop of a Serve replica woke (ray_metrics.SERVE_LOOP_LAG, in ms), per `loop_type`: `user_code`
# runs the LLM server with vLLM's frontend and its output handler, `main` the replica's requests and streams,
# `router` the routing of the handles the process holds (in a PD decode replica, its handle to prefill). A loop that
# lags holds what it hands on.
LOOP_LAG = m.SERVE_LOOP_LAG
LOOPS = ("user_code", "main", "router")
LOOP_FIGURES = tuple(f"loop_{loop}" for loop in LOOPS)
IN_MS = SECONDS | set(LOOP_FIGURES)  # the figures shown in ms


def ray_name(name: str) -> str:
    return "ray_" + name.replace(":", "_")


RAY_PARTS = ("sum", "count", "bucket")  # Ray's histograms: the buckets too, since its sums are midpoints


def series() -> list[str]:
    """Every series `engine_means` reads, in both namings (the buckets only in Ray's, whose sums are midpoints)."""
    exact = [f"{name}_{part}" for name in HISTOGRAMS.values() for part in ("sum", "count")]
    ray = [f"{ray_name(name)}_{part}" for name in HISTOGRAMS.values() for part in RAY_PARTS]
    return exact + ray + [f"{LOOP_LAG}_{part}" for part in RAY_PARTS]


# Series name -> (figure, part) for the engines' histograms; the loops' figure is in the sample's labels.
_PARTS = {
    **{f"{name}_{part}": (figure, part) for figure, name in HISTOGRAMS.items() for part in ("sum", "count")},
    **{f"{ray_name(name)}_{part}": (figure, part) for figure, name in HISTOGRAMS.items() for part in RAY_PARTS},
}


def _figure_part(sample: Sample) -> tuple[str, str] | None:
    if sample.name.startswith(f"{LOOP_LAG}_") and (loop := sample.labels.get("loop_type")) in LOOPS:
        return f"loop_{loop}", sample.name.removeprefix(f"{LOOP_LAG}_")
    return _PARTS.get(sample.name)


def _totals(samples: Iterable[Sample]) -> tuple[dict[str, tuple[float, float]], dict[str, dict[float, float]]]:
    """(figure -> (sum, count), figure -> {le: cumulative count}) over every engine's samples; buckets only where
    the sums are Ray's midpoints."""
    totals: dict[str, list[float]] = {}
    buckets: dict[str, dict[float, float]] = {}
    for s in samples:
        if (got := _figure_part(s)) is None:
            continue
        figure, part = got
        if part == "bucket":
            add_bucket(buckets.setdefault(figure, {}), s)
        else:
            totals.setdefault(figure, [0.0, 0.0])[0 if part == "sum" else 1] += s.value
    return {figure: (v[0], v[1]) for figure, v in totals.items()}, buckets


def requests_finished(before: Mapping[str, Iterable[Sample]], after: Mapping[str, Iterable[Sample]]) -> float | None:
    """Requests the engines finished between two readings, by vLLM's end-to-end histogram: decode's where the app
    has a decode role (every request ends there, with or without a remote prefill), else every engine's (a role whose
    histogram has not been exported yet counts none); None where no engine was read."""
    if not after:
        return None
    roles = ["decode"] if "decode" in after else list(after)

    def count(samples: Iterable[Sample]) -> float:
        return _totals(samples)[0].get("e2e", (0.0, 0.0))[1]

    return sum(count(after[role]) - count(before.get(role, ())) for role in roles)


def _bounds(before: dict[float, float], after: dict[float, float], events: float, scale: float) -> list | None:
    """The mean's lower and upper bound from the buckets the `events` between two readings landed in (scaled; the
    upper one None where one landed in the +Inf bucket); None where the buckets do not account for exactly those
    events (a counter that started again between the readings)."""
    got = landed(before, after)
    if sum(got.values()) != round(events):
        return None
    low, high = edge_sums(got)
    return [round(low / events * scale, 2), None if high == INF else round(high / events * scale, 2)]


def engine_means(
    before: Mapping[str, Iterable[Sample]], after: Mapping[str, Iterable[Sample]]
) -> dict[str, dict[str, dict]]:
    """role -> figure -> {"mean": per event between the readings (ms for times), "count": events, and where the sums
    are Ray's midpoints "bounds": [lower, upper] of that mean from the buckets}: the events that happened between
    `before` and `after` (each a role's samples)."""
    means: dict[str, dict[str, dict]] = {}
    for role, samples in after.items():
        (then, then_buckets), (now, now_buckets) = _totals(before.get(role, ())), _totals(samples)
        for figure, (total, count) in now.items():
            old_total, old_count = then.get(figure, (0.0, 0.0))
            events = count - old_count
            if events <= 0:
                continue
            scale = 1000 if figure in SECONDS else 1
            got: dict = {"mean": round((total - old_total) / events * scale, 2 if scale > 1 else 1), "count": events}
            bounds = figure in now_buckets and _bounds(then_buckets.get(figure, {}), now_buckets[figure], events, scale)
            if bounds:
                got["bounds"] = bounds
            means.setdefault(role, {})[figure] = got
    return means


HOPS = (
    ("prefill", "prefill_sent", "prefill_answered"),  # prefill's whole answer: its queue, compute, the return
    ("decode_first_byte", "decode_sent", "decode_first_byte"),  # decode: the KV read, the first token
    ("total", None, "decode_first_byte"),  # the proxy's own TTFT
)


def hop_percentiles(hops: Iterable[Mapping], quantiles: tuple[int, ...] = (50, 95)) -> dict[str, dict[str, float]]:
    """hop -> {"p50": ms, ...} over the requests that reached both of its ends."""
    rows = list(hops)
    figures: dict[str, dict[str, float]] = {}
    for name, start, end in HOPS:
        spans = sorted(
            (r[end] - (r[start] if start else 0.0)) for r in rows if r.get(end) is not None and
            (start is None or r.get(start) is not None)
        )  # fmt: skip
        if spans:
            figures[name] = {f"p{q}": round(_quantile(spans, q) * 1000, 1) for q in quantiles}
    return figures


def _quantile(ordered: list[float], q: int) -> float:
    """The nearest-rank percentile of an ordered list."""
    rank = max(1, -(-q * len(ordered) // 100))
    return ordered[min(rank, len(ordered)) - 1]
