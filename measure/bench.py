"""`make bench` and `make compare`, the pure half: the load generator's configuration for a sweep of load
points, and what its results mean for the stack (goodput at the SLO, the load that breaks it, dollars per
million output tokens, the KV transfer figures of a PD endpoint, a verdict between two runs).

The load generator is NVIDIA's AIPerf (pinned in llmclient/bench-requirements.txt; why that one:
docs/routing-and-benchmarks.md). This module writes its YAML configuration (schema 2.0, AIPerf 0.13.0
src/aiperf/config/config.py AIPerfConfig) and reads its summary export (profile_export_aiperf.json);
llmclient/ runs it. Metric names are AIPerf's: `time_to_first_token`, `inter_token_latency` (per
request: (latency - TTFT) / (output tokens - 1), what vLLM calls TPOT), `inter_chunk_latency` (the gaps
between streamed chunks, vLLM's ITL), `request_latency`, `goodput` (requests per second meeting every SLO).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from measure import kv_proof
from ray_llm_eks.domain.core.errors import UNSET, ConfigError, yaml_text

# A load point meets the SLO when at least this share of its requests met every target: DistServe's
# "SLO attainment" (Zhong et al., OSDI 2024, arXiv:2401.09670) is reported at 90%.
ATTAINMENT = 0.9
MIN_POINTS = 4
SWEEP_KINDS = ("concurrency", "rate")
WORKLOADS = ("fixed", "multiturn", "dataset")
# AIPerf 0.13.0 FileDataset `format` values for a user's own JSONL (aiperf/dataset/loader/*: single_turn
# rows {"text": ..., "output_length": ...}; multi_turn rows {"session_id", "turns": [...]}).
DATASET_FORMATS = ("single_turn", "multi_turn")
API_KEY_REFERENCE = "${OPENAI_API_KEY}"  # AIPerf substitutes it from the environment: the key is never in a file

# Figure -> (AIPerf metric, statistic) for each percentile we report.
PERCENTILES = (50, 95, 99)
LATENCIES = {
    "ttft_ms": "time_to_first_token",
    "tpot_ms": "inter_token_latency",
    "itl_ms": "inter_chunk_latency",
    "e2e_ms": "request_latency",
}


@dataclass(frozen=True)
class Sweep:
    kind: str  # "concurrency" (requests in flight) or "rate" (requests per second, Poisson arrivals)
    points: tuple[float, ...]

    @property
    def unit(self) -> str:
        return "requests in flight" if self.kind == "concurrency" else "requests/s offered"


def parse_sweep(text: str) -> Sweep:
    """`concurrency:1,2,4,8` or `rate:0.5,1,2,4`: at least four increasing load points."""
    kind, _, values = text.partition(":")
    if kind not in SWEEP_KINDS or not values:
        raise ConfigError("bench --sweep", text, f"KIND:P1,P2,... with KIND one of {yaml_text(SWEEP_KINDS)}")
    try:
        points = tuple(float(v) for v in values.split(","))
    except ValueError:
        raise ConfigError("bench --sweep", text, "numbers separated by commas") from None
    if len(points) < MIN_POINTS or any(p <= 0 for p in points) or list(points) != sorted(set(points)):
        raise ConfigError("bench --sweep", text, f"at least {MIN_POINTS} distinct increasing load points above 0")
    if kind == "concurrency" and any(p != int(p) for p in points):
        raise ConfigError("bench --sweep", text, "whole numbers of requests in flight")
    return Sweep(kind, tuple(int(p) if kind == "concurrency" else p for p in points))


@dataclass(frozen=True)
class Workload:
    """What each request carries. `fixed`: every prompt `isl` tokens, every answer `osl` (end-of-sequence
    ignored). `multiturn`: conversations of `turns` turns, each opening with `context_tokens` of its own and
    `system_tokens` shared by all, each turn adding `isl` user tokens to the history (the prefix the next turn
    can reuse). `dataset`: the user's JSONL in AIPerf's `single_turn` or `multi_turn` format."""

    kind: str = "fixed"
    isl: int = 512
    osl: int = 128
    turns: int = 4
    context_tokens: int = 1024
    system_tokens: int = 0
    turn_delay_ms: int = 0
    dataset: str | None = None
    dataset_format: str = "single_turn"

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"fixed lengths: {self.isl} prompt tokens, {self.osl} output tokens"
        if self.kind == "multiturn":
            shared = f", {self.system_tokens} shared system tokens" if self.system_tokens else ""
            return (
                f"multi-turn chats: {self.turns} turns, {self.context_tokens} context tokens per conversation"
                f"{shared}, {self.isl} tokens per user turn, {self.osl} per answer"
            )
        return f"dataset {self.dataset} ({self.dataset_format})"


def check_workload(workload: Workload) -> Workload:
    if workload.kind not in WORKLOADS:
        raise ConfigError("bench --workload", workload.kind, f"one of {yaml_text(WORKLOADS)}")
    for name in ("isl", "osl", "turns"):
        if getattr(workload, name) < 1:
            raise ConfigError(f"bench --{name}", getattr(workload, name), "1 or more")
    for name in ("context_tokens", "system_tokens", "turn_delay_ms"):
        if getattr(workload, name) < 0:
            raise ConfigError(f"bench --{name.replace('_', '-')}", getattr(workload, name), "0 or more")
    if workload.kind == "dataset":
        if not workload.dataset:
            raise ConfigError("bench --dataset", UNSET, "a JSONL file for --workload dataset")
        if workload.dataset_format not in DATASET_FORMATS:
            raise ConfigError("bench --dataset-format", workload.dataset_format, f"one of {yaml_text(DATASET_FORMATS)}")
    elif workload.dataset:
        raise ConfigError("bench --dataset", workload.dataset, "only with --workload dataset")
    return workload


# Tokens a chat template adds around a prompt (role markers, a think block), left free of the served context.
TEMPLATE_TOKENS = 64
# The workload fields a context bounds (each set by its flag, e.g. --context-tokens).
CONTEXT_FIELDS = ("isl", "osl", "turns", "context_tokens", "system_tokens")


def tokens_per_request(workload: Workload) -> int | None:
    """The most context one request of the workload takes (None: a dataset's, unknown here)."""
    if workload.kind == "fixed":
        return workload.isl + workload.osl + TEMPLATE_TOKENS
    if workload.kind == "multiturn":
        history = workload.system_tokens + workload.context_tokens + workload.turns * (workload.isl + workload.osl)
        return history + TEMPLATE_TOKENS
    return None


def fit_to_context(workload: Workload, context: int | None, given: set[str]) -> tuple[Workload, str]:
    """The workload within a served context of `context` tokens (the endpoint's max_model_len; None: not said):
    the default fixed lengths shortened to fit (a quarter for the answer), else the workload as given, or a
    ConfigError naming the flags to set. `given`: the fields the user set. Returns the workload and a line
    saying what changed (empty when nothing did)."""
    need = tokens_per_request(workload)
    if context is None or need is None or need <= context:
        return workload, ""
    if workload.kind == "fixed" and not {"isl", "osl"} & given:
        osl = min(workload.osl, context // 4)
        isl = context - osl - TEMPLATE_TOKENS
        if isl >= 1:
            fitted = replace(workload, isl=isl, osl=osl)
            return fitted, (
                f"the endpoint serves {context} tokens of context (max_model_len): prompts of {isl} tokens and "
                f"answers of {osl} instead of {workload.isl} and {workload.osl} (--isl/--osl set them)"
            )
    if workload.kind == "fixed":
        key, value = "bench --isl + --osl", f"{workload.isl} + {workload.osl}"
    else:
        key, value = "bench --system-tokens + --context-tokens + --turns x (--isl + --osl)", need - TEMPLATE_TOKENS
    raise ConfigError(
        key,
        value,
        f"at most {context - TEMPLATE_TOKENS} tokens a request: the endpoint serves {context} tokens of context "
        f"(max_model_len), {TEMPLATE_TOKENS} of them left for the chat template",
    )


@dataclass(frozen=True)
class Bounds:
    """How long one load point may take: whichever comes first of `requests` and `seconds`, then at most
    `grace_seconds` for the requests in flight; a warm-up of `warmup_requests` before the first point."""

    requests: int = 64
    sessions: int | None = None  # multi-turn: whole conversations instead of a request count
    seconds: float = 120.0
    grace_seconds: float = 60.0
    warmup_requests: int = 8
    request_timeout: float = 300.0

    def worst_case_seconds(self, points: int) -> float:
        return points * (self.seconds + self.grace_seconds)


@dataclass(frozen=True)
class Target:
    url: str
    model: str
    tokenizer: str  # a Hugging Face id or a local directory with the tokenizer's files
    api_key: bool = True  # send `Authorization: Bearer $OPENAI_API_KEY`


# A Hugging Face repo id, org/name: what AIPerf (transformers' AutoTokenizer) can load a tokenizer from.
_HF_REPO = re.compile(r"[\w][\w.-]*/[\w][\w.-]*")


def stack_tokenizer(model_source: str, model_id: str) -> str | None:
    """Where a stack's tokenizer comes from: its model_source when that is a Hugging Face repo (a model served
    under its own name), else its model_id when that is one; None when neither is (weights from S3 under an
    own name: the user names --tokenizer)."""
    return next((c for c in (model_source, model_id) if isinstance(c, str) and _HF_REPO.fullmatch(c)), None)


def aiperf_config(
    target: Target,
    workload: Workload,
    kind: str,
    load: float,
    bounds: Bounds,
    slo_ttft_ms: float,
    slo_tpot_ms: float,
    seed: int,
    artifacts: str,
    warmup: bool,
) -> dict:
    """AIPerf's configuration for ONE load point (schema 2.0). One invocation per point lets the caller read
    the engines' metrics between points (the KV transfer figures per point)."""
    endpoint: dict[str, Any] = {
        "url": target.url.rstrip("/"),
        "type": "chat",
        "streaming": True,  # TTFT and the inter-token gaps need the stream
        "timeout": bounds.request_timeout,
    }
    if target.api_key:
        endpoint["apiKey"] = API_KEY_REFERENCE
    dataset: dict[str, Any]
    if workload.kind == "dataset":
        dataset = {"type": "file", "path": workload.dataset, "format": workload.dataset_format}
        dataset["osl"] = workload.osl
    else:
        dataset = {
            "type": "synthetic",
            "entries": max(bounds.sessions or bounds.requests, 16),
            "prompts": {"isl": {"mean": workload.isl, "stddev": 0}, "osl": {"mean": workload.osl, "stddev": 0}},
        }
        if workload.kind == "fixed":
            # vLLM's extension: answer exactly max tokens, so every load point moves the same tokens.
            endpoint["extra"] = {"ignore_eos": True}
        else:
            dataset["turns"] = {"mean": workload.turns, "stddev": 0}
            dataset["turnDelay"] = {"mean": workload.turn_delay_ms, "stddev": 0}
            prefix: dict[str, int] = {}
            if workload.context_tokens:
                prefix["userContextLength"] = workload.context_tokens
            if workload.system_tokens:
                prefix["sharedSystemLength"] = workload.system_tokens
            if prefix:
                dataset["prefixPrompts"] = prefix
    profiling: dict[str, Any] = {"name": "profiling", "duration": bounds.seconds}
    if bounds.sessions:
        profiling["sessions"] = bounds.sessions
    else:
        profiling["requests"] = bounds.requests
    profiling["gracePeriod"] = bounds.grace_seconds
    if kind == "concurrency":
        profiling.update(type="concurrency", concurrency=int(load))
    else:
        profiling.update(type="poisson", rate=float(load))
    phases = [profiling]
    if warmup and bounds.warmup_requests:
        concurrency = int(load) if kind == "concurrency" else 1
        phases.insert(
            0,
            {
                "name": "warmup",
                "type": "concurrency",
                "excludeFromResults": True,
                "requests": bounds.warmup_requests,
                "concurrency": concurrency,
            },
        )
    return {
        "schemaVersion": "2.0",
        "randomSeed": seed,
        "benchmark": {
            "model": target.model,
            "endpoint": endpoint,
            "tokenizer": {"name": target.tokenizer},
            "dataset": dataset,
            "phases": phases,
            # A request is good when it meets both: its TTFT and its time per output token (AIPerf `goodput`).
            "slos": {"time_to_first_token": slo_ttft_ms, "inter_token_latency": slo_tpot_ms},
            "artifacts": {"dir": artifacts, "summary": ["json"], "records": ["jsonl"]},
            # The generator shares the machine with what it measures on small hosts: one worker process each.
            "runtime": {"ui": "none", "workers": 1, "recordProcessors": 1},
            "serverMetrics": {"enabled": False},
            "gpuTelemetry": {"enabled": False},
        },
    }


# ---------------------------------------------------------------------------------------------
# Reading AIPerf's summary


def _stat(export: Mapping, metric: str, stat: str) -> float | None:
    value = (export.get(metric) or {}).get(stat)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


@dataclass(frozen=True)
class KvFigures:
    """NIXL transfers during one load point (vLLM 0.26 NixlPromMetrics, recorded on the reading engine)."""

    transfers: float
    megabytes: float
    seconds: float  # summed transfer time

    @classmethod
    def of(cls, counters: kv_proof.KvCounters) -> KvFigures:
        """From one reading of the engines' KV counters (`make verify`'s reader and kv_proof.counters); the
        byte and time totals are Ray's histogram sums (bucket midpoints: measure/kv_proof.py)."""
        return cls(counters.transfers, counters.bytes_sum / 1e6, counters.seconds_sum)

    def per_transfer(self) -> dict[str, float | None]:
        if not self.transfers:
            return {"transfers": 0, "mb_per_transfer": None, "ms_per_transfer": None, "gb_per_s": None}
        return {
            "transfers": self.transfers,
            "mb_per_transfer": self.megabytes / self.transfers,
            "ms_per_transfer": 1000 * self.seconds / self.transfers,
            "gb_per_s": (self.megabytes / 1000 / self.seconds) if self.seconds else None,
        }


@dataclass
class Point:
    load: float
    requests: int
    errors: int
    duration_s: float
    request_rate: float | None  # completed requests per second
    output_tokens_per_s: float | None
    goodput: float | None  # requests per second meeting every SLO
    good_fraction: float | None  # share of requests meeting every SLO
    latencies: dict[str, dict[str, float | None]] = field(default_factory=dict)  # figure -> {p50, p95, p99}
    usd_per_million_output_tokens: float | None = None
    kv: dict[str, float | None] | None = None

    @property
    def meets_slo(self) -> bool:
        return self.good_fraction is not None and self.good_fraction >= ATTAINMENT and not self.errors


def read_point(export: Mapping, load: float) -> Point:
    """One load point from AIPerf's profile_export_aiperf.json."""
    completed = _stat(export, "request_count", "avg") or 0
    errors = sum(int(e.get("count", 0)) for e in export.get("error_summary") or [] if isinstance(e, Mapping))
    latencies = {
        figure: {f"p{q}": _stat(export, metric, f"p{q}") for q in PERCENTILES} for figure, metric in LATENCIES.items()
    }
    return Point(
        load=load,
        requests=int(completed),
        errors=errors,
        duration_s=_stat(export, "benchmark_duration", "avg") or 0.0,
        request_rate=_stat(export, "request_throughput", "avg"),
        output_tokens_per_s=_stat(export, "output_token_throughput", "avg"),
        goodput=_stat(export, "goodput", "avg"),
        good_fraction=_stat(export, "good_request_fraction", "avg"),
        latencies=latencies,
    )


def usd_per_million_tokens(usd_per_hour: float | None, tokens_per_s: float | None) -> float | None:
    if usd_per_hour is None or not tokens_per_s:
        return None
    return usd_per_hour / (tokens_per_s * 3600) * 1_000_000


# ---------------------------------------------------------------------------------------------
# The run and its verdict


@dataclass
class Run:
    label: str
    url: str
    model: str
    sweep: Sweep
    workload: Workload
    slo_ttft_ms: float
    slo_tpot_ms: float
    slo_source: str  # "stack <name>" or "defaults"
    usd_per_hour: float | None
    cost_source: str
    pd: bool | None  # None: not known (no stack given)
    seed: int
    points: list[Point]
    note: str = ""  # e.g. "CPU rehearsal, not a GPU verdict"

    def verdict(self) -> dict[str, Any]:
        good = [p for p in self.points if p.meets_slo]
        best = max(self.points, key=lambda p: p.goodput or 0.0, default=None)
        broken = next((p for p in self.points if not p.meets_slo), None)
        at_slo = good[-1] if good else None
        return {
            "best_goodput": best.goodput if best else None,
            "best_goodput_load": best.load if best else None,
            "highest_load_meeting_slo": at_slo.load if at_slo else None,
            "breaks_slo_at": broken.load if broken else None,
            "usd_per_million_output_tokens_at_slo": at_slo.usd_per_million_output_tokens if at_slo else None,
        }

    def to_json(self) -> dict:
        data = asdict(self)
        data["sweep"] = {"kind": self.sweep.kind, "points": list(self.sweep.points), "unit": self.sweep.unit}
        data["workload"]["description"] = self.workload.describe()
        data["attainment"] = ATTAINMENT
        data["verdict"] = self.verdict()
        return data


def run_from_json(data: Mapping) -> Run:
    points = [Point(**{k: v for k, v in p.items() if k in Point.__dataclass_fields__}) for p in data["points"]]
    workload = Workload(**{k: v for k, v in data["workload"].items() if k in Workload.__dataclass_fields__})
    sweep = Sweep(data["sweep"]["kind"], tuple(data["sweep"]["points"]))
    fields = {k: v for k, v in data.items() if k in Run.__dataclass_fields__}
    return Run(**{**fields, "points": points, "workload": workload, "sweep": sweep})


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}{unit}"


def _load(value: float | None, sweep: Sweep, none: str) -> str:
    if value is None:
        return none
    return f"{value:g} ({sweep.unit})"


def verdict_rows(runs: Sequence[Run]) -> list[list[str]]:
    """The verdict table: one column per run."""
    rows = [["", *(r.label for r in runs)]]
    verdicts = [r.verdict() for r in runs]
    rows.append(["best goodput (req/s meeting the SLO)", *(_fmt(v["best_goodput"]) for v in verdicts)])
    rows.append(
        [
            f"highest load meeting the SLO ({int(ATTAINMENT * 100)}% of requests)",
            *(_load(v["highest_load_meeting_slo"], r.sweep, "none") for r, v in zip(runs, verdicts, strict=True)),
        ]
    )
    rows.append(
        [
            "breaks the SLO at",
            *(_load(v["breaks_slo_at"], r.sweep, "not within the sweep") for r, v in zip(runs, verdicts, strict=True)),
        ]
    )
    rows.append(
        [
            "$ per million output tokens at that load",
            *(_fmt(v["usd_per_million_output_tokens_at_slo"], digits=3) for v in verdicts),
        ]
    )
    rows.append(["$/h (source)", *(f"{_fmt(r.usd_per_hour)} ({r.cost_source})" for r in runs)])
    rows.append(["SLO: TTFT / TPOT (ms)", *(f"{r.slo_ttft_ms:g} / {r.slo_tpot_ms:g} ({r.slo_source})" for r in runs)])
    return rows


def text_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def point_rows(run: Run) -> list[list[str]]:
    """The per-point table `make bench` prints."""
    rows = [
        [
            "load",
            "req/s",
            "goodput",
            "good %",
            "TTFT p50/p95/p99 ms",
            "TPOT p50/p95/p99 ms",
            "ITL p50/p95/p99 ms",
            "E2E p50/p95/p99 ms",
            "out tok/s",
            "$/Mtok",
            "errors",
        ]
    ]
    for p in run.points:

        def trio(figure: str, p: Point = p) -> str:
            return "/".join(_fmt(p.latencies.get(figure, {}).get(f"p{q}"), digits=0) for q in PERCENTILES)

        rows.append(
            [
                f"{p.load:g}",
                _fmt(p.request_rate),
                _fmt(p.goodput),
                _fmt(None if p.good_fraction is None else 100 * p.good_fraction, digits=0),
                trio("ttft_ms"),
                trio("tpot_ms"),
                trio("itl_ms"),
                trio("e2e_ms"),
                _fmt(p.output_tokens_per_s, digits=1),
                _fmt(p.usd_per_million_output_tokens, digits=3),
                str(p.errors),
            ]
        )
    if any(p.kv for p in run.points):
        rows[0].append("KV MB/xfer, ms/xfer")
        for row, p in zip(rows[1:], run.points, strict=True):
            kv = p.kv or {}
            row.append(f"{_fmt(kv.get('mb_per_transfer'))}, {_fmt(kv.get('ms_per_transfer'), digits=1)}")
    return rows
