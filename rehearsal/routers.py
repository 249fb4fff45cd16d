"""Two request routers side by side on the same running engines, judged from what the engines and Serve
report: vLLM's own prefix-cache counters (hit rate), Serve's replica logs (which replica served each turn of
each conversation: did it land where its prefix is cached?), the load generator's TTFT. Pure Python over
text and records (`make test` checks it); rehearsal/checks/routing.py runs it."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from measure import bench, kv_proof
from ray_llm_eks.domain.telemetry import ray_metrics as m

# vLLM's prefix-cache counters through Ray, with the Serve replica's unique id as `ReplicaId`.
QUERIES, HITS = m.PREFIX_CACHE_QUERIES, m.PREFIX_CACHE_HITS
# A Serve replica's access line (Ray 2.58 ray/serve/_private/logging_utils.py ServeFormatter):
# "INFO 2026-12-01 14:41:47,906 <app>_<deployment> <replica> <request id> -- CALL chat OK 838.5ms".
CALL = re.compile(r"^\w+ \S+ \S+ (?P<component>\S+) (?P<replica>\S+) (?P<request>\S+) -- CALL (?:chat|completions) ")
# What a Serve router logs for each replica that did not answer a queue-length probe in time (Ray 2.58
# ray/serve/_private/request_router/request_router.py RequestRouter._probe_queue_lens): the sign of a starved
# router loop.
LATE_PROBE = "Failed to get queue length from"


def prefix_cache_counts(samples: Iterable[kv_proof.Sample]) -> dict[str, tuple[float, float]]:
    """replica id -> (prompt tokens queried, found in the prefix cache) so far, from the samples of QUERIES and
    HITS that llmclient/metrics.py read (every Ray node's endpoint)."""
    counts: dict[str, list[float]] = {}
    for sample in samples:
        if sample.name not in (QUERIES, HITS):
            continue
        pair = counts.setdefault(sample.labels.get("ReplicaId", ""), [0.0, 0.0])
        pair[0 if sample.name == QUERIES else 1] += sample.value
    return {replica: (q, h) for replica, (q, h) in counts.items()}


def hit_rate(
    before: Mapping[str, tuple[float, float]], after: Mapping[str, tuple[float, float]], replicas: Iterable[str]
) -> tuple[float, float]:
    """(hit tokens, queried tokens) between two snapshots, over `replicas` (a replica absent before started
    after it: its counters started at 0)."""
    hits = queries = 0.0
    for replica in replicas:
        q0, h0 = before.get(replica, (0.0, 0.0))
        q1, h1 = after.get(replica, (0.0, 0.0))
        queries += q1 - q0
        hits += h1 - h0
    return hits, queries


def served_by(log_lines: Iterable[str], component: str) -> dict[str, str]:
    """request id -> replica id, from the access lines of `component` (`<app>_<deployment>`) replicas."""
    found = {}
    for line in log_lines:
        m = CALL.match(line)
        if m and m["component"] == component:
            found[m["request"]] = m["replica"]
    return found


def late_probes(log_lines: Iterable[str]) -> int:
    """Queue-length probes that ran out their deadline, in Serve's logs."""
    return sum(1 for line in log_lines if LATE_PROBE in line)


@dataclass(frozen=True)
class Landing:
    landed: int  # turns after the first that went to the replica that served the conversation's previous turn
    turns: int  # turns after the first whose replica, and their previous turn's, are known
    unknown: int  # turns after the first without a replica in Serve's logs

    @property
    def share(self) -> float | None:
        return self.landed / self.turns if self.turns else None


def landing(records: Iterable[Mapping], replica_of: Mapping[str, str]) -> Landing:
    """Of each conversation's turns after the first, how many landed on the replica that served its previous
    turn, which holds the longest cached prefix of it (AIPerf records: conversation_id, turn_index,
    x_request_id; warm-up records left out)."""
    turns: dict[str, dict[int, str | None]] = {}
    for record in records:
        meta = record.get("metadata") or {}
        if meta.get("benchmark_phase") == "warmup":
            continue
        turns.setdefault(meta["conversation_id"], {})[int(meta["turn_index"])] = replica_of.get(meta["x_request_id"])
    landed = known = unknown = 0
    for by_turn in turns.values():
        for index, replica in by_turn.items():
            if index == 0:
                continue
            previous = by_turn.get(index - 1)
            if replica is None or previous is None:
                unknown += 1
                continue
            known += 1
            landed += replica == previous
    return Landing(landed, known, unknown)


def later_turn_ttfts_ms(records: Iterable[Mapping]) -> list[float]:
    """TTFT of every turn after the first (the turns whose prefix a replica may hold)."""
    values = []
    for record in records:
        meta = record.get("metadata") or {}
        ttft = (record.get("metrics") or {}).get("time_to_first_token") or {}
        if meta.get("benchmark_phase") != "warmup" and int(meta.get("turn_index", 0)) > 0 and "value" in ttft:
            values.append(float(ttft["value"]))
    return values


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@dataclass(frozen=True)
class Phase:
    policy: str
    hit_tokens: float
    queried_tokens: float
    landing: Landing
    ttft_ms: dict[str, float | None]  # every turn: p50, p95 (AIPerf)
    later_ttft_ms: dict[str, float | None]  # turns after the first: p50, p95
    requests: int
    errors: int
    late_probes: int = 0  # queue-length probes past their deadline during the phase (Serve's logs)

    @property
    def hit_rate(self) -> float | None:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else None

    def as_json(self) -> dict:
        return {
            "policy": self.policy,
            "prefix_cache_hit_rate": self.hit_rate,
            "hit_tokens": self.hit_tokens,
            "queried_tokens": self.queried_tokens,
            "landed_on_prefix_replica": self.landing.share,
            "landed": self.landing.landed,
            "later_turns": self.landing.turns,
            "later_turns_unknown": self.landing.unknown,
            "ttft_ms": self.ttft_ms,
            "later_turn_ttft_ms": self.later_ttft_ms,
            "requests": self.requests,
            "errors": self.errors,
            "late_queue_length_probes": self.late_probes,
        }


def phase(
    policy: str, hits: tuple[float, float], land: Landing, point: bench.Point, records: list[dict], late: int = 0
) -> Phase:
    later = later_turn_ttfts_ms(records)
    ttft = point.latencies.get("ttft_ms", {})
    return Phase(
        policy,
        hits[0],
        hits[1],
        land,
        {"p50": ttft.get("p50"), "p95": ttft.get("p95")},
        {"p50": percentile(later, 50), "p95": percentile(later, 95)},
        point.requests,
        point.errors,
        late,
    )


def table(phases: list[Phase]) -> list[str]:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    def landed(p: Phase) -> str:
        return f"{pct(p.landing.share)} ({p.landing.landed}/{p.landing.turns})"

    rows = [
        ["", *(p.policy for p in phases)],
        ["prefix-cache hit rate (vLLM)", *(f"{pct(p.hit_rate)} of {p.queried_tokens:.0f} tok" for p in phases)],
        ["later turns on their prefix's replica", *(landed(p) for p in phases)],
        ["TTFT p50 / p95 ms, every turn", *(f"{ms(p.ttft_ms['p50'])} / {ms(p.ttft_ms['p95'])}" for p in phases)],
        [
            "TTFT p50 / p95 ms, later turns",
            *(f"{ms(p.later_ttft_ms['p50'])} / {ms(p.later_ttft_ms['p95'])}" for p in phases),
        ],
        ["requests / errors", *(f"{p.requests} / {p.errors}" for p in phases)],
        ["queue-length probes past their deadline", *(str(p.late_probes) for p in phases)],
    ]
    return bench.text_table(rows).splitlines()


def verdict(first: Phase, second: Phase, prefix_trees: int) -> str | None:
    """Why the comparison failed (None: prefix affinity, the second phase, won on hit rate)."""
    if errors := first.errors + second.errors:
        return f"router comparison: {errors} requests failed"
    if not prefix_trees:
        return "no PrefixTreeActor after the switch: the prefix-affinity router never ran"
    if (second.hit_rate or 0) <= (first.hit_rate or 0):
        return f"prefix affinity did not raise the prefix-cache hit rate: {second.hit_rate} vs {first.hit_rate}"
    return None


@dataclass(frozen=True)
class PrefixOverNixl:
    line: str
    problem: str | None  # None: the cached prefix moved to decode as any prompt does


def prefix_over_nixl(
    before: kv_proof.KvCounters, after: kv_proof.KvCounters, hits: tuple[float, float], requests: int
) -> PrefixOverNixl:
    """`requests` sharing a long prefix, one at a time, on PD with a prefix cache on prefill: prefill's cache
    must have hit (tokens), every request must have moved its KV to decode with no failed read, and decode
    may compute only the last prompt token of each itself (as without a hit: kv_proof)."""
    transfers = after.transfers - before.transfers
    failed = (after.failed_transfers - before.failed_transfers) + (
        after.failed_notifications - before.failed_notifications
    )
    recomputed = after.decode_tokens.get("local_compute", 0.0) - before.decode_tokens.get("local_compute", 0.0)
    line = (
        f"prefix over NIXL ({requests} requests sharing a prefix, one at a time): prefill prefix-cache hits "
        f"{hits[0]:.0f} of {hits[1]:.0f} prompt tokens; {transfers:.0f} KV reads, {failed:.0f} failed; decode "
        f"computed {recomputed:.0f} prompt tokens itself"
    )
    if not hits[0]:
        return PrefixOverNixl(line, "no request found the shared prefix cached on prefill")
    if transfers < requests or failed:
        return PrefixOverNixl(line, "a request's KV did not move to decode over NIXL")
    if recomputed > requests:
        return PrefixOverNixl(line, "decode computed the prompt again")
    return PrefixOverNixl(line, None)
