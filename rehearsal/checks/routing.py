"""`--compare-routers`: the same shared-prefix multi-turn workload (AIPerf), once with Serve's power-of-two router
and once with the stack's prefix-affinity router, on one running application: prefix-cache hit rate (vLLM),
the share of later turns that landed on the replica holding their prefix (Serve's logs), TTFT (AIPerf).

The application is deployed with power of two on the routed role (printed), then switched to the stack's
router with the application's `deployments:` override, as an operator would without a new serve config; the
check reports whether that restarted the engines (replica ids and pids before and after). Prefix affinity
must win on hit rate. Needs two replicas of a routed role (dp: collocated; xpyd: prefill)."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

from llmclient import aiperf, core, metrics
from llmclient import verify as verify_client
from measure import bench, kv_proof
from ray_llm_eks.domain.serving import routing
from ray_llm_eks.domain.serving.role_view import views_of
from ray_llm_eks.domain.serving.serve_app import parse_document
from rehearsal import routers, substitute, topology, verify
from rehearsal.checks import Check, by_flag
from rehearsal.context import Context, RehearsalFailed, say
from rehearsal.prepare import rehearsed_settings
from rehearsal.verify import http_json

# The workload: conversations of TURNS turns, each opening with its own CONTEXT tokens (the prefix a replica
# caches), one request in flight. With two or more in flight Ray 2.58's prefix router stalled on 2 busy cores
# (PROBE_DEADLINE below): it blocks the router's event loop in ray.get on its tree actor for every routing
# decision, so one request's blocking calls outlast the queue-length probes of another's, which then retries.
# With one in flight the routers still differ where it matters here: power of two picks between idle replicas
# at random, prefix affinity picks the replica holding the conversation.
CONVERSATIONS, TURNS, CONTEXT, USER_TOKENS, ANSWER_TOKENS, CONCURRENCY = 8, 4, 512, 64, 16, 1
SWITCH_TIMEOUT = 900.0  # s: Serve restarts the engines one at a time, 1.5-2 min each on 2 busy cores
FIRST_REQUEST_DEADLINE = 600.0  # s: the router's PrefixTreeActor took ~2 min to start on 2 busy cores
DEFAULT_AFFINITY = routing.RoleRouting("prefixAffinity").request_router_config()
# Ray 2.58 ray/serve/_private/constants.py (default 0.1 s); prefix_aware_router.py _prefix_match_best_replicas
# calls _probe_queue_lens(..., 0): always the first deadline, where Serve's own routers back off to 1 s.
PROBE_DEADLINE = "RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S"
# At 1 s (4 in flight) and 5 s (2 in flight) it still stalled here: each routing attempt blocks the router's
# loop in ray.get on the tree actor (a process competing for 2 busy cores) while the other attempts' probes run
# out their time. Kept raised for the first requests after the switch, whose probes find no cached queue length.
PROBE_DEADLINE_HERE = "5.0"


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compare-routers",
        action="store_true",
        help="power of two, then the stack's prefix affinity, on the same engines (needs 2 replicas of a role)",
    )
    parser.add_argument(
        "--compare-routers-in-flight",
        type=int,
        default=CONCURRENCY,
        metavar="N",
        help=f"requests in flight in both phases (default {CONCURRENCY}: more stalled Ray 2.58's prefix router here)",
    )


def routed_role(document: dict) -> str | None:
    """The role whose router is compared: the first of collocated, prefill that starts with 2+ replicas."""
    starts = topology.expected_replicas(document)
    roles = parse_document(document, "rehearsal").roles
    return next((r for r in routing.ROUTABLE_ROLES if r in roles and starts.get(r, 0) >= 2), None)


def _prepare(local: substitute.LocalDocument, args: argparse.Namespace) -> list[str]:
    role = routed_role(local.document)
    if role is None:
        raise ValueError("--compare-routers needs a collocated or prefill role with 2 replicas or more (dp, xpyd)")

    def without_router(name: str, config: dict) -> dict | None:
        """The router `name`'s config had, taken out of the routed role's (Serve's power of two instead)."""
        return config.setdefault("deployment_config", {}).pop("request_router_config", None) if name == role else None

    stack_router = substitute.edit_roles(local.document, "rehearsal", without_router)[role]
    args.compare_routers_role = role
    args.compare_routers_config = stack_router or DEFAULT_AFFINITY
    source = "the stack's" if stack_router else "Ray's default prefix affinity (the stack routes by power of two)"
    app = local.document["applications"][0]
    app.setdefault("runtime_env", {}).setdefault("env_vars", {})[PROBE_DEADLINE] = PROBE_DEADLINE_HERE
    return [
        f"{role}: deployed with Serve's power-of-two router; {source} router is switched in later",
        f"runtime_env {PROBE_DEADLINE}: 0.1 -> {PROBE_DEADLINE_HERE} s for both routers (2 busy cores answer "
        "queue-length probes slower than Serve's default; the prefix router probes at that first deadline on "
        "every attempt: docs/routing-and-benchmarks.md)",
    ]


def _replicas(ctx: Context) -> dict[str, list[tuple[str, int | None]]]:
    application = verify.application(ctx.dashboard, ctx.app)
    return {
        name: sorted((r["replica_id"], r.get("pid")) for r in d.get("replicas") or [])
        for name, d in (application.get("deployments") or {}).items()
    }


def _metrics(ctx: Context) -> dict[str, tuple[float, float]]:
    return routers.prefix_cache_counts(metrics.scrape(ctx.metrics_urls, (routers.QUERIES, routers.HITS)))


def _prefix_tree_actors(ctx: Context) -> int:
    """Live PrefixTreeActor actors (Ray's state API): PrefixCacheAffinityRouter.initialize_state creates one
    per routed deployment (Ray 2.58 prefix_aware_router.py), so none exists before that router runs."""
    listed = http_json("GET", f"{ctx.dashboard}/api/v0/actors?limit=10000&detail=false", timeout=30)
    actors = ((listed.get("data") or {}).get("result") or {}).get("result") or []
    return sum(1 for a in actors if a.get("class_name") == "PrefixTreeActor" and a.get("state") == "ALIVE")


def _replica_logs(ctx: Context, deployment: str) -> list[str]:
    lines = []
    # Ray names the file after the deployment with ':' as '_' (replica_llm_LLMServer_Qwen--Qwen3_5-9B_<id>.log).
    for path in sorted((ctx.log_dir / "serve").glob(f"replica_{ctx.app}_{deployment.replace(':', '_')}_*.log")):
        lines += path.read_text(errors="replace").splitlines()
    return lines


def _late_probes(ctx: Context) -> int:
    """Serve's warnings so far, over every node's replica logs (the router runs in the caller: the ingress, or
    decode for prefill on PD)."""
    return sum(
        routers.late_probes(path.read_text(errors="replace").splitlines())
        for log_dir in ctx.log_dirs
        for path in sorted((log_dir / "serve").glob("replica_*.log"))
    )


def _phase(ctx: Context, policy: str, seed: int, deployment: str, out: Path) -> routers.Phase:
    role = ctx.args.compare_routers_role
    tokenizer = parse_document(ctx.document, "rehearsal").roles[role].model.source
    workload = bench.Workload(
        "multiturn", isl=USER_TOKENS, osl=ANSWER_TOKENS, turns=TURNS, context_tokens=CONTEXT
    )  # fmt: skip
    bounds = bench.Bounds(sessions=CONVERSATIONS, seconds=300, grace_seconds=120, warmup_requests=0)
    target = bench.Target(ctx.url, ctx.model, tokenizer, api_key=ctx.api_key is not None)
    in_flight = ctx.args.compare_routers_in_flight
    config = bench.aiperf_config(target, workload, "concurrency", in_flight, bounds, 1e9, 1e9, seed, "", False)
    replicas = [r["replica_id"] for r in verify.running(ctx.dashboard, ctx.app, role)]
    before, late = _metrics(ctx), _late_probes(ctx)
    ctx.mark(f"{policy}: {CONVERSATIONS} conversations x {TURNS} turns, {in_flight} in flight (AIPerf)")
    result = aiperf.run_point(config, out / policy, ctx.api_key, timeout=bounds.worst_case_seconds(1) + 240)
    time.sleep(verify.METRICS_WAIT)  # a few of Ray's exports (ray_cluster.METRICS_REPORT_INTERVAL_MS)
    after = _metrics(ctx)
    hits = routers.hit_rate(before, after, replicas)
    if not hits[1]:
        raise RehearsalFailed(
            f"{policy}: no prompt token counted by vLLM's prefix cache ({routers.QUERIES} per ReplicaId "
            f"{replicas}; found {sorted(after)}): is enable_prefix_caching on for this role?"
        )
    component = f"{ctx.app}_{deployment}"
    land = routers.landing(result.records, routers.served_by(_replica_logs(ctx, deployment), component))
    point = bench.read_point(result.summary, in_flight)
    return routers.phase(policy, hits, land, point, result.records, _late_probes(ctx) - late)


def _class_name(path: str) -> str:
    return str(path).replace(":", ".").rpartition(".")[2]


def _stream(ctx: Context, prompts: list[str], deadline: float = 240.0) -> list:
    """One streamed request of 8 tokens per prompt, one after the other; the client is closed before the loop."""

    async def each() -> list:
        async with core.client(ctx.url, ctx.api_key, timeout=FIRST_REQUEST_DEADLINE) as api:
            chats = ([{"role": "user", "content": prompt}] for prompt in prompts)
            return [await core.stream_chat(api, ctx.model, chat, 8, deadline=deadline) for chat in chats]

    return asyncio.run(each())


def _first_request(ctx: Context) -> float:
    """Seconds one streamed request takes right after the switch: the new router's first use creates its
    PrefixTreeActor (a new Ray worker process), and Ray 2.58's router waits on it with ray.get."""
    start = time.monotonic()
    (result,) = _stream(ctx, ["Count from one to ten."], FIRST_REQUEST_DEADLINE)
    if not result.ok:
        raise RehearsalFailed(f"the first request after the router switch failed: {result.error}")
    return time.monotonic() - start


def _warm(ctx: Context) -> None:
    """The restarted engines answer a few distinct prompts first, as the first phase's did (its smoke and
    requests), one after the other as the phase sends them: new prompts match no prefix, so the prefix router
    spreads them over the least-used trees."""
    failed = [r.error for r in _stream(ctx, [f"Warm-up {i}: count from one to ten." for i in range(2)]) if not r.ok]
    if failed:
        raise RehearsalFailed(f"warm-up after the router switch: {failed[0]}")


def _switch(ctx: Context, deployment: str, router: dict) -> str:
    """The stack's router through the application's `deployments:` override; waits until the deployment runs
    with it. Returns what happened to the replicas (restarted or reconfigured)."""
    before = _replicas(ctx)
    document = json.loads(json.dumps(ctx.document))
    document["applications"][0]["deployments"] = [{"name": deployment, "request_router_config": router}]
    start = time.monotonic()
    http_json("PUT", f"{ctx.dashboard}/api/serve/applications/", document, timeout=60)
    ctx.mark(f"router of {deployment} switched with a deployments: override: {router['request_router_class']}")
    while True:
        application = verify.application(ctx.dashboard, ctx.app)
        details = (application.get("deployments") or {}).get(deployment) or {}
        configured = ((details.get("deployment_config") or {}).get("request_router_config") or {}).get(
            "request_router_class", ""
        )
        replicas = details.get("replicas") or []
        settled = (
            application.get("status") == "RUNNING"
            and details.get("status") == "HEALTHY"
            and _class_name(configured) == _class_name(router["request_router_class"])
            and replicas
            and all(r.get("state") == "RUNNING" for r in replicas)
            and all(
                d.get("status") == "HEALTHY" and all(r.get("state") == "RUNNING" for r in d.get("replicas") or [])
                for d in (application.get("deployments") or {}).values()
            )
        )
        if settled:
            break
        if time.monotonic() - start > SWITCH_TIMEOUT:
            raise RehearsalFailed(f"the router switch did not settle within {SWITCH_TIMEOUT:g} s")
        time.sleep(2.0)
    after = _replicas(ctx)
    seconds = time.monotonic() - start
    restarted = sorted(name for name in after if set(after[name]) != set(before.get(name, [])))
    what = (
        f"restarted the replicas of {', '.join(restarted)} (new replica ids/pids)"
        if restarted
        else "reconfigured in place (same replica ids and pids)"
    )
    ctx.mark(f"switch settled after {seconds:.0f} s: {what}")
    ctx.results["router switch"] = {"seconds": seconds, "restarted": restarted, "before": before, "after": after}
    return what


def _compare(ctx: Context) -> None:
    role = ctx.args.compare_routers_role
    deployment = verify.running(ctx.dashboard, ctx.app, role)[0]["deployment"]
    out = ctx.run_dir / "routers"
    if _prefix_tree_actors(ctx):
        raise RehearsalFailed("a PrefixTreeActor runs before the prefix-affinity router was configured")
    first = _phase(ctx, "powerOfTwo", 11, deployment, out)
    what = _switch(ctx, deployment, ctx.args.compare_routers_config)
    first_request = _first_request(ctx)
    ctx.mark(f"first request after the switch answered in {first_request:.1f} s")
    _warm(ctx)
    second = _phase(ctx, "prefixAffinity", 12, deployment, out)
    trees = _prefix_tree_actors(ctx)
    lines = routers.table([first, second])
    say(f"\nRouters compared on {role} ({CONVERSATIONS} conversations x {TURNS} turns, {CONTEXT} context tokens each):")
    for line in lines:
        say(f"  {line}")
    say(f"  the switch {what}; the first request after it took {first_request:.1f} s; PrefixTreeActor alive: {trees}")
    report = {
        "role": role,
        "switch": what,
        "switch_seconds": ctx.results["router switch"]["seconds"],
        "first_request_after_switch_seconds": first_request,
        "phases": [first.as_json(), second.as_json()],
        "prefix_tree_actors": trees,
    }
    (out / "routers.json").write_text(json.dumps(report, indent=2) + "\n")
    ctx.results["routers"] = report
    ctx.timeline += [f"routers ({role}): {line}" for line in lines[1:3]]
    if problem := routers.verdict(first, second, trees):
        raise RehearsalFailed(problem)


COMPARE_ROUTERS = Check(
    "compare routers",
    _compare,
    selected=by_flag("compare_routers"),
    options=_options,
    prepare=_prepare,
)


# The shared prefix: this share of the prefill engine's max_model_len (longer than an attention block, so that
# the next request finds whole blocks of it in the prefill engine's cache, and short enough for the tail); its
# words are counted with the model's own tokens per word (make verify's calibration).
SHARED_SHARE, TAIL_WORDS = 0.5, 12


def _prefill_caches_prefixes(ctx: Context) -> bool:
    """PD whose prefill engines were asked for a prefix cache (hybrid models keep it off unless asked)."""
    prefill = parse_document(ctx.document, "rehearsal").roles.get("prefill")
    return ctx.pd and prefill is not None and bool(prefill.engine.enable_prefix_caching)


def _kv_and_prefix(ctx: Context) -> tuple[kv_proof.KvCounters, dict[str, tuple[float, float]]]:
    samples = metrics.scrape(ctx.metrics_urls, (*kv_proof.SERIES, routers.QUERIES, routers.HITS))
    return kv_proof.counters(samples), routers.prefix_cache_counts(samples)


def prefix_over_nixl(ctx: Context) -> None:
    """A prompt whose prefix the prefill engine has cached, then read by decode over NIXL: prefix caching on
    a hybrid model's prefill (Mamba layers in vLLM's 'align' mode) composed with NIXL's transfer (vLLM 0.26
    nixl/base_worker.py _apply_prefix_caching: the SSM group's earlier blocks are placeholders, the last one
    the state). Requests one after the other sharing a long prefix, one more than there are prefill replicas
    (then at least one lands where the prefix is cached, whatever the router): prefill's prefix cache must hit,
    and each request must move its KV to decode without a failed read and without decode computing the prompt
    again (prompt tokens by source, as `make verify` judges)."""
    rng = random.Random(7)
    # The stack's modelSpec: the context of a model of the user's that the run loads from the hub.
    override = rehearsed_settings(ctx.args.stack, ctx.args.set).serving.model_spec
    views = views_of(parse_document(ctx.document, "rehearsal").roles, verify_client.served_context(override))
    max_model_len = views["prefill"].max_model_len
    start, _ = _kv_and_prefix(ctx)
    per_word, _ = asyncio.run(verify_client.calibrate(ctx.url, ctx.model, ctx.api_key, seed=7))
    # The first reading once the calibration's transfer and decode's own prompt token are both counted (they
    # are recorded at different moments), so that they do not fall into the check's figures.
    end = time.monotonic() + verify.METRICS_WAIT * 4
    while True:
        kv_before, cache_before = _kv_and_prefix(ctx)
        local = kv_before.decode_tokens.get("local_compute", 0.0) > start.decode_tokens.get("local_compute", 0.0)
        if (kv_before.transfers > start.transfers and local) or time.monotonic() > end:
            break
        time.sleep(2.0)
    shared = verify_client.prompt(int(max_model_len * SHARED_SHARE / per_word), rng)
    prefills = [r["replica_id"] for r in verify.running(ctx.dashboard, ctx.app, "prefill")]
    questions = [f"{shared} {verify_client.prompt(TAIL_WORDS, rng)}" for _ in range(len(prefills) + 1)]
    count = len(questions)

    async def one_at_a_time() -> list[core.RequestResult]:
        # One client in one event loop, closed inside it (a client is bound to the loop that first used it).
        async with core.client(ctx.url, ctx.api_key, timeout=FIRST_REQUEST_DEADLINE) as api:
            return [await core.stream_chat(api, ctx.model, [{"role": "user", "content": q}], 4) for q in questions]

    for result in asyncio.run(one_at_a_time()):
        if not result.ok or not result.output_tokens:
            raise RehearsalFailed(f"prefix over NIXL: a request sharing a cached prefix failed: {result.error}")
    end = time.monotonic() + verify.METRICS_WAIT * 4
    while True:
        kv_after, cache_after = _kv_and_prefix(ctx)
        hits, queried = routers.hit_rate(cache_before, cache_after, prefills)
        if (kv_after.transfers - kv_before.transfers >= count and hits) or time.monotonic() > end:
            break
        time.sleep(2.0)
    verdict = routers.prefix_over_nixl(kv_before, kv_after, (hits, queried), count)
    ctx.mark(verdict.line)
    ctx.results["prefix over nixl"] = verdict
    if verdict.problem:
        raise RehearsalFailed(f"{verdict.line}: {verdict.problem}")


PREFIX_OVER_NIXL = Check("prefix over nixl", prefix_over_nixl, when=_prefill_caches_prefixes)
