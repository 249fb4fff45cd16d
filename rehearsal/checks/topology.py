"""What makes the topology that topology, checked on the running engines (the judging is rehearsal.topology's,
pure): RUNNING replicas per role as the serve config asks, every LLM replica served a request, every TP rank
worked, and (PD) the decode engine read KV from every prefill replica without a failed read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rehearsal import topology, verify
from rehearsal.checks import Check, measure_threads
from rehearsal.context import Context, RehearsalFailed
from rehearsal.logs import NIXL_FAILURE, PREFIXES, grep_logs


def check_nixl(log_dir: Path | Sequence[Path]) -> None:
    """A KV read that failed: vLLM then recomputes the prompt on the decode engine (kv_load_failure_policy
    "recompute"), so the answers come though nothing went through NIXL."""
    if failed := grep_logs(log_dir, NIXL_FAILURE):
        raise RehearsalFailed(f"the decode engine recomputed the prompt: {PREFIXES.sub('', failed[0], count=1)}")


def check_replicas(doc: dict, application: dict) -> dict[str, list[dict]]:
    """RUNNING replicas per LLM role (Serve's REST API); fails unless each role runs what the config asks."""
    running = topology.running_replicas(application)
    if mismatches := topology.replica_mismatches(topology.expected_replicas(doc), running):
        raise RehearsalFailed("replicas per role: " + "; ".join(mismatches))
    return running


def replicas(ctx: Context) -> None:
    ctx.running = check_replicas(ctx.document, verify.application(ctx.dashboard, ctx.app))
    counts = ", ".join(f"{role} {len(reps)}" for role, reps in ctx.running.items())
    ctx.mark(f"RUNNING replicas per role as the serve config asks: {counts}")


def every_replica(ctx: Context) -> None:
    """Requests until every RUNNING LLM replica served one, threads sampled meanwhile (rehearsal.checks.threads
    judges them)."""
    concurrency = max([2, *(len(reps) for reps in ctx.running.values())])
    work = verify.serve_every_replica(
        ctx.url, ctx.model, ctx.metrics_urls, ctx.running, concurrency, api_key=ctx.api_key
    )
    (served, sent, errors), loaded, per_process = measure_threads(ctx.run_id, work)
    ctx.served = served
    ctx.results["threads under load"] = loaded
    ctx.results["cpu seconds per process"] = per_process
    ctx.mark(f"{sent} more requests, {concurrency} at a time; requests per replica so far: {served}")
    if errors:
        raise RehearsalFailed(f"{len(errors)} of {sent} requests failed; first: {errors[0]}")
    if unserved := topology.idle_replicas(ctx.running, served):
        raise RehearsalFailed(f"after {sent} requests, replicas that served none: {', '.join(unserved)}")


def tp_ranks(ctx: Context) -> None:
    tp = topology.tensor_parallel_size(ctx.document)
    ranks = topology.rank_seconds(ctx.results.get("cpu seconds per process", {}))
    ctx.mark("CPU seconds per TP rank during those requests: " + ", ".join(
        f"rank {rank} {seconds:.2f} s" for rank, seconds in sorted(ranks.items())))  # fmt: skip
    if lazy := topology.idle_ranks(ranks, tp):
        raise RehearsalFailed(f"tensor parallel {tp}: {'; '.join(lazy)}")


def kv_reads(ctx: Context) -> None:
    ctx.kv = verify.kv_sources(ctx.log_dirs, ctx.running)
    check_nixl(ctx.log_dirs)  # again: the later requests reached the other prefill replicas
    if unread := topology.prefills_not_read(*ctx.kv):
        raise RehearsalFailed(f"KV not transferred from every prefill replica: {'; '.join(unread)}")


REPLICAS = Check("replicas", replicas)
EVERY_REPLICA = Check("every replica served", every_replica)
# Worker processes per rank are vLLM's multiprocessing executor's, as Ray Serve LLM runs a CPU engine.
TP_RANKS = Check("tp ranks", tp_ranks, when=lambda ctx: ctx.cpu_engines and topology.tensor_parallel_size(
    ctx.document) > 1)  # fmt: skip
KV_READS = Check("kv reads", kv_reads, when=lambda ctx: ctx.pd)
