"""Proof that every request's KV cache moved from prefill to decode over NIXL, judged from the engines' own
counters (vLLM 0.26's NIXL metrics and prompt-token sources, as Ray exports them) read before and after a
few long-prompt requests sent one at a time. Plain data in, a verdict out: `make verify` (llmclient/verify.py)
and the rehearsal gather the samples, this module decides.

Ray 2.58 exports a histogram's `_sum` as the sum of its bucket MIDPOINTS, not of the values
(ray/_private/telemetry/open_telemetry_metric_recorder.py: "The histogram sum value will be an
approximation since we use bucket midpoints"): vLLM's bytes-per-transfer buckets are powers of 4
(nixl/stats.py: 2 KiB, 8 KiB, ... 8 GiB), so `nixl_bytes_transferred_sum` rounds a 0.95 MiB transfer to
1.25 MiB. The exact evidence is the bucket each transfer was counted in: the proof checks that every
request's transfer landed in the bucket its expected size falls in.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from measure import hf_model_spec
from ray_llm_eks.domain.serving import fit_prediction, model_table, role_view, serve_config, vllm_fit
from ray_llm_eks.domain.serving.llm_config import EngineKwargs
from ray_llm_eks.domain.telemetry import ray_metrics as m

# vLLM's decode engine computes the last prompt token itself (it needs that token's logits): one token per
# request (vllm/v1/core/sched/scheduler.py _update_waiting_for_remote_kv; hybrid models read N-1 tokens,
# nixl/base_scheduler.py _get_remote_prefill_token_count).
RECOMPUTED_PER_REQUEST = 1
INF = math.inf


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class KvCounters:
    """One reading of the counters that matter, summed over the engines of each role."""

    bytes_buckets: Mapping[float, float] = field(default_factory=dict)  # le -> transfers (cumulative)
    seconds_buckets: Mapping[float, float] = field(default_factory=dict)  # le -> transfers (cumulative)
    bytes_sum: float = 0.0  # Ray's midpoint approximation
    seconds_sum: float = 0.0  # idem
    failed_transfers: float = 0.0
    failed_notifications: float = 0.0
    expired: float = 0.0  # KV freed on prefill before decode read it
    decode_tokens: Mapping[str, float] = field(default_factory=dict)  # prompt tokens on decode, by source
    engines: Mapping[str, int] = field(default_factory=dict)  # role -> engines seen
    requests: Mapping[str, float] = field(default_factory=dict)  # role -> requests its Serve replicas handled
    paths: Mapping[str, float] = field(default_factory=dict)  # selective PD's path -> decode requests (if on)

    @property
    def transfers(self) -> float:
        return self.bytes_buckets.get(INF, 0.0)


# The series `counters` reads (a Prometheus query or a scrape keeps only these).
SERIES = (
    f"{m.NIXL_BYTES}_bucket",
    f"{m.NIXL_BYTES}_sum",
    f"{m.NIXL_XFER_TIME}_bucket",
    f"{m.NIXL_XFER_TIME}_sum",
    *m.NIXL_FAILURE_COUNTERS,
    m.PROMPT_TOKENS_BY_SOURCE,
    m.SERVE_REPLICA_QUERIES,
    m.SERVE_REQUESTS,
    m.SELECTIVE_PD_REQUESTS,
)


def engine_roles(samples: Iterable[Sample]) -> dict[str, str]:
    """WorkerId -> role, from the replicas' own Serve gauge (its `deployment` names the role)."""
    roles = {}
    for s in samples:
        if s.name == m.SERVE_REPLICA_QUERIES and s.labels.get("WorkerId"):
            role = serve_config.role_of(s.labels.get("deployment", ""))
            if role:
                roles[s.labels["WorkerId"]] = role
    return roles


def _le(value: str) -> float:
    """A bucket's `le` label as a number."""
    return INF if value in ("+Inf", "Inf", "inf") else float(value)


def add_bucket(cumulative: dict[float, float], sample: Sample) -> None:
    """Add one engine's `_bucket` sample to a histogram summed over engines (le -> cumulative count)."""
    le = _le(sample.labels.get("le", "+Inf"))
    cumulative[le] = cumulative.get(le, 0.0) + sample.value


def counters(samples: Iterable[Sample]) -> KvCounters:
    samples = list(samples)
    roles = engine_roles(samples)
    sums: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {f"{m.NIXL_BYTES}_bucket": {}, f"{m.NIXL_XFER_TIME}_bucket": {}}
    decode_tokens: dict[str, float] = {}
    requests: dict[str, float] = {}
    paths: dict[str, float] = {}
    for s in samples:
        if s.name == m.SERVE_REQUESTS:
            if role := serve_config.role_of(s.labels.get("deployment", "")):
                requests[role] = requests.get(role, 0.0) + s.value
        elif s.name == m.SELECTIVE_PD_REQUESTS:
            path = s.labels.get("path", "?")
            paths[path] = paths.get(path, 0.0) + s.value
        elif s.name == m.PROMPT_TOKENS_BY_SOURCE:
            if roles.get(s.labels.get("WorkerId", "")) == "decode":
                source = s.labels.get("source", "?")
                decode_tokens[source] = decode_tokens.get(source, 0.0) + s.value
        elif s.name in buckets:
            add_bucket(buckets[s.name], s)
        else:
            sums[s.name] = sums.get(s.name, 0.0) + s.value
    return KvCounters(
        bytes_buckets=buckets[f"{m.NIXL_BYTES}_bucket"],
        seconds_buckets=buckets[f"{m.NIXL_XFER_TIME}_bucket"],
        bytes_sum=sums.get(f"{m.NIXL_BYTES}_sum", 0.0),
        seconds_sum=sums.get(f"{m.NIXL_XFER_TIME}_sum", 0.0),
        failed_transfers=sums.get(m.NIXL_FAILED_TRANSFERS, 0.0),
        failed_notifications=sums.get(m.NIXL_FAILED_NOTIFICATIONS, 0.0),
        expired=sums.get(m.NIXL_KV_EXPIRED, 0.0),
        decode_tokens=decode_tokens,
        engines=dict(Counter(roles.values())),
        requests=requests,
        paths=paths,
    )


def landed(before: Mapping[float, float], after: Mapping[float, float]) -> Counter[tuple[float, float]]:
    """The observations between two readings of a cumulative histogram: (lower, upper] bucket -> count."""
    bounds = sorted(set(before) | set(after))
    out: Counter[tuple[float, float]] = Counter()
    below_then = below_now = 0.0
    lower = 0.0
    for le in bounds:
        now, then = after.get(le, 0.0), before.get(le, 0.0)
        count = (now - below_now) - (then - below_then)
        if count > 0:
            out[(lower, le)] = round(count)
        below_now, below_then, lower = now, then, le
    return out


def edge_sums(events: Mapping[tuple[float, float], float]) -> tuple[float, float]:
    """The events' total at their buckets' lower edges and at their upper edges: the bounds of their true sum."""
    return sum(b[0] * c for b, c in events.items()), sum(b[1] * c for b, c in events.items())


def bucket_of(value: float, bounds: Iterable[float]) -> tuple[float, float]:
    """The (lower, upper] histogram bucket holding `value`."""
    lower = 0.0
    for le in sorted(set(bounds) | {INF}):
        if value <= le:
            return (lower, le)
        lower = le
    return (lower, INF)


@dataclass(frozen=True)
class KvShape:
    """What one request's KV weighs: the model's KV bytes per prompt token (every attention layer, every TP
    rank), its per-sequence state (linear-attention layers: conv and SSM state, unpadded), and the engine's
    attention block size (KV moves in whole blocks)."""

    kv_bytes_per_token: float
    state_bytes_per_sequence: float
    block_size: int
    hybrid: bool
    transfers_per_request: int = 1  # one read per decode TP rank, each of its share

    def tokens_read(self, prompt_tokens: int) -> int:
        """Prompt tokens whose KV decode reads: a hybrid model's prefill stops one short (decode recomputes the
        last token from the state); otherwise the whole prompt's blocks are read."""
        return max(prompt_tokens - RECOMPUTED_PER_REQUEST, 0) if self.hybrid else prompt_tokens

    def blocks(self, prompt_tokens: int) -> int:
        return math.ceil(self.tokens_read(prompt_tokens) / self.block_size)

    def expected_bytes(self, prompt_tokens: int) -> float:
        """Bytes of one request's KV, all ranks together."""
        return self.blocks(prompt_tokens) * self.block_size * self.kv_bytes_per_token + self.state_bytes_per_sequence

    def describe(self, prompt_tokens: int) -> str:
        return (
            f"{self.blocks(prompt_tokens)} block(s) x {self.block_size} tokens x {self.kv_bytes_per_token:g} B + "
            f"{size_text(self.state_bytes_per_sequence)} state = {size_text(self.expected_bytes(prompt_tokens))}"
        )


def spec_from_hf_config(config: Mapping) -> model_table.ModelSpec:
    """The KV facts of a model from its config.json alone (a local model such as the rehearsal's stand-in):
    the fit helper's derivation, the linear-attention state kept as its shapes so the engine's
    mamba_ssm_cache_dtype applies."""
    derived, _ = hf_model_spec.spec_from_hf_config(dict(config))
    text = hf_model_spec.text_config(dict(config))
    linear = None
    if derived.get("linearLayers"):
        linear = vllm_fit.GatedDeltaNet(
            derived["linearLayers"],
            text["linear_num_key_heads"],
            text["linear_num_value_heads"],
            text["linear_key_head_dim"],
            text["linear_value_head_dim"],
            text["linear_conv_kernel_dim"],
            text.get("mamba_ssm_dtype"),
        )
    return model_table.ModelSpec(
        parameters=0.0,  # the weights do not move
        weight_dtype=derived["weightDtype"],
        kv_layers=derived["kvLayers"],
        kv_heads=derived["kvHeads"],
        head_dim=derived["headDim"],
        state_mib_per_sequence=derived.get("stateMiBPerSequence", 0),
        max_context=derived["maxContext"],
        linear=linear,
    )


def shape_of(model: model_table.ModelSpec, engine_kwargs: EngineKwargs) -> KvShape:
    """The KV a request of `model` moves under these engine kwargs, from the fit's copy of vLLM's layout
    (ray_llm_eks/domain/serving/vllm_fit.py: the hybrid block grown to cover a Mamba page, the unpadded state per
    layer)."""
    max_model_len = role_view.effective_max_model_len(engine_kwargs, lambda: model.max_context)
    engine = fit_prediction.Engine.of(engine_kwargs, max_model_len)
    layout = fit_prediction.layout(model, engine)
    tp = engine.tensor_parallel
    per_token = layout.page_bytes // layout.block_size * model.kv_layers * tp if layout.block_size else 0
    linear_layers = model.linear.layers if model.linear is not None else 0
    return KvShape(
        kv_bytes_per_token=per_token,
        state_bytes_per_sequence=layout.mamba_page_bytes * linear_layers * tp,
        block_size=layout.block_size,
        hybrid=layout.hybrid,
        transfers_per_request=tp,
    )


@dataclass
class Verdict:
    lines: list[str] = field(default_factory=list)  # what was measured, printed either way
    failures: list[str] = field(default_factory=list)  # one line each; the first is `make verify`'s line

    @property
    def ok(self) -> bool:
        return not self.failures


def size_text(n: float) -> str:
    """Bytes in the largest binary unit that keeps them at 1 or more."""
    if n == INF:
        return "inf"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _bucket_text(bucket: tuple[float, float], fmt=size_text) -> str:
    return f"({fmt(bucket[0])}, {fmt(bucket[1])}]"


def _seconds(n: float) -> str:
    return "inf" if n == INF else f"{n:g} s"


def judge(
    before: KvCounters,
    after: KvCounters,
    prompt_tokens: list[int],
    shape: KvShape,
    floor_bytes_per_s: float | None,
    backend_asked: list[str],
    backend_seen: set[str] | None,
) -> Verdict:
    """The verdict on `prompt_tokens` (one entry per request, sent one at a time between the two readings)."""
    v = Verdict()
    n = len(prompt_tokens)
    if not after.engines.get("decode"):
        v.failures.append("no decode engine in the metrics (no Serve replica whose deployment names decode)")
        return v
    bounds = [le for le in after.bytes_buckets if le != INF] or [le for le in before.bytes_buckets if le != INF]
    per_rank = [shape.expected_bytes(p) / shape.transfers_per_request for p in prompt_tokens]
    expected = Counter()
    for size in per_rank:
        expected[bucket_of(size, bounds)] += shape.transfers_per_request
    got = landed(before.bytes_buckets, after.bytes_buckets)
    # Other traffic between the readings adds transfers of its own: every expected one must be there.
    missing = expected - got
    mean_tokens = sum(prompt_tokens) / n
    v.lines.append(
        f"KV bytes per request: {shape.describe(round(mean_tokens))} expected for {mean_tokens:.0f} prompt tokens; "
        "Ray counts each transfer in a bucket: "
        + "; ".join(f"{c} expected in {_bucket_text(b)}" for b, c in sorted(expected.items()))
        + ", measured: "
        + ("; ".join(f"{c} in {_bucket_text(b)}" for b, c in sorted(got.items())) or "no transfer")
    )
    if missing:
        if sum(got.values()) < sum(expected.values()):
            v.failures.append(
                f"KV did not move for every request: {sum(got.values())} NIXL transfer(s) for {n} long-prompt "
                f"request(s), {sum(expected.values())} expected"
            )
        else:
            v.failures.append(
                "KV transfers of another size than expected: "
                + "; ".join(f"{c} in {_bucket_text(b)}" for b, c in sorted(got.items()))
                + " measured, "
                + "; ".join(f"{c} in {_bucket_text(b)}" for b, c in sorted(expected.items()))
                + " expected"
            )
    moved = after.bytes_sum - before.bytes_sum
    seconds = after.seconds_sum - before.seconds_sum
    times = landed(before.seconds_buckets, after.seconds_buckets)
    if moved > 0 and seconds > 0:
        # Bounds from the buckets: bytes at their buckets' edges over times at theirs.
        (least_bytes, most_bytes), (least_time, most_time) = edge_sums(got), edge_sums(times)
        low = least_bytes / most_time
        high = most_bytes / least_time if least_time else INF
        floor_text = f"floor {floor_bytes_per_s / 1e9:.3g} GB/s" if floor_bytes_per_s else "no floor"
        v.lines.append(
            f"transfer throughput: about {moved / seconds / 1e9:.3g} GB/s per second of transfer time (Ray's bucket "
            f"midpoints; between {low / 1e9:.3g} and {high / 1e9:.3g} GB/s from the bucket edges; {floor_text})"
        )
        if floor_bytes_per_s and high < floor_bytes_per_s:
            v.failures.append(
                f"KV moved at {high / 1e9:.3g} GB/s at most, below the floor {floor_bytes_per_s / 1e9:.3g} GB/s "
                "(NIXL over TCP instead of EFA?)"
            )
    for label, attr in (
        ("failed NIXL transfer(s)", "failed_transfers"),
        ("failed NIXL notification(s)", "failed_notifications"),
        ("request(s) whose KV expired on prefill", "expired"),
    ):
        if (count := getattr(after, attr) - getattr(before, attr)) > 0:
            v.failures.append(f"{count:g} {label} during the requests")
    local = after.decode_tokens.get("local_compute", 0.0) - before.decode_tokens.get("local_compute", 0.0)
    received = after.decode_tokens.get("external_kv_transfer", 0.0) - before.decode_tokens.get(
        "external_kv_transfer", 0.0
    )
    # Each transfer of other traffic between the readings is a request whose last token decode computes too.
    others = max(sum(got.values()) - sum(expected.values()), 0) // shape.transfers_per_request
    allowed = RECOMPUTED_PER_REQUEST * (n + others)
    v.lines.append(f"decode prompt tokens: {received:g} received as KV, {local:g} computed (at most {allowed} allowed)")
    if local > allowed:
        v.failures.append(
            f"decode recomputed {local:g} prompt tokens of {n} request(s) (at most {allowed} allowed): the KV "
            "did not arrive"
        )
    asked = ", ".join(backend_asked) or "UCX (NIXL's default)"
    if backend_seen is None:
        v.lines.append(f"NIXL backend: {asked} as configured (engine logs not read)")
    else:
        seen = ", ".join(sorted(backend_seen)) or "none logged"
        v.lines.append(f"NIXL backend: {seen} (engine logs; the stack asks {asked})")
        if backend_seen != set(backend_asked or ["UCX"]):
            v.failures.append(f"NIXL backend in the engine logs is {seen}, the stack asks {asked}")
    return v


# selective PD's path label values (ray_llm_eks/serve_ingress/local_prefill.py LOCAL, SPLIT: the pods' code, shipped
# apart)
LOCAL_PATH, SPLIT_PATH = "local", "split"
# Prompt tokens the decode engine computed or found in its own prefix cache (vllm/v1/metrics/stats.py).
ON_DECODE = ("local_compute", "local_cache_hit")


def _delta(before: Mapping[str, float], after: Mapping[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def judge_split_path(v: Verdict, before: KvCounters, after: KvCounters, requests: int) -> None:
    """With selective PD on: the long-prompt requests `judge` saw move their KV were counted on the split path."""
    split = _delta(before.paths, after.paths, SPLIT_PATH)
    v.lines.append(f"selective PD: decode counted split +{split:g}, local "
                   f"+{_delta(before.paths, after.paths, LOCAL_PATH):g} for {requests} long prompt(s)")  # fmt: skip
    if split < requests:
        v.failures.append(f"selective PD counted {split:g} of {requests} long prompt(s) on the split path")


def judge_local(
    before: KvCounters, after: KvCounters, prompt_tokens: list[int], below: int, transfers_per_request: int = 1
) -> Verdict:
    """The verdict on short prompts under selective PD (one entry per request, sent one at a time between the
    readings): each counted on the local path, served by decode alone (prefill's Serve replicas handled
    nothing, no NIXL transfer, no prompt token received as KV) and prefilled there. Other traffic between the
    readings is allowed for: requests decode counted on the split path may move KV and reach prefill."""
    v = Verdict()
    n = len(prompt_tokens)
    local, split = _delta(before.paths, after.paths, LOCAL_PATH), _delta(before.paths, after.paths, SPLIT_PATH)
    transfers = after.transfers - before.transfers
    prefill = _delta(before.requests, after.requests, "prefill")
    received = _delta(before.decode_tokens, after.decode_tokens, "external_kv_transfer")
    on_decode = sum(_delta(before.decode_tokens, after.decode_tokens, source) for source in ON_DECODE)
    v.lines.append(
        f"short prompts of {', '.join(map(str, prompt_tokens))} tokens (selectivePd {below}): decode counted "
        f"local +{local:g}, split +{split:g}; prefill requests +{prefill:g}; NIXL transfers +{transfers:g}; decode "
        f"prompt tokens {on_decode:g} prefilled there, {received:g} received as KV"
    )
    if longer := [p for p in prompt_tokens if p >= below]:
        v.failures.append(f"a short prompt of {longer[0]} tokens is not below selectivePd {below}: nothing to prove")
        return v
    if local < n:
        v.failures.append(f"selective PD counted {local:g} of {n} short prompt(s) on the local path")
    if prefill > split:
        v.failures.append(f"prefill handled {prefill:g} request(s) during {n} short prompt(s) ({split:g} split)")
    if transfers > split * transfers_per_request:
        v.failures.append(f"{transfers:g} NIXL transfer(s) during {n} short prompt(s) ({split:g} split): KV moved "
                          "for a prompt decode should prefill itself")  # fmt: skip
    if received > 0 and split == 0:
        v.failures.append(f"decode received {received:g} prompt tokens as KV for short prompts served locally")
    if on_decode < sum(prompt_tokens):
        v.failures.append(f"decode prefilled {on_decode:g} prompt tokens of {sum(prompt_tokens)} short-prompt ones")
    return v
