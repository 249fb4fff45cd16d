"""`--faults`: under a steady load (llmclient.faultload), one fault at a time on the running engines, each
followed by recovery; per fault what the caller saw (failed requests and their HTTP codes, cut streams, 200s
whose content is empty or wrong), seconds until the endpoint served again, which alert fired (when a
Prometheus is in the rehearsal), printed as a table and kept as JSON.

The gate: no wrong or empty 200 for engine, replica and head faults, and the endpoint serving again within
the fault's bound. A KV-path fault (the prefill engine stalled) is reported, not gated on content: a failed
NIXL read on a hybrid model returns wrong content with 200 in vLLM 0.26 (docs/faults-and-upgrades.md); its
guard is the failed-transfer alert and `make verify`.

`head` restarts the Ray head (GCS, Serve controller, the head's proxy) and needs the engines on a second Ray
node: choosing it gives the rehearsal two nodes, the head with no CPUs for replicas (as KubeRay's head,
num-cpus 0), and the GCS store of `--gcs-ft` (off, redis: Debian's redis-server, rocksdb: Ray's embedded
store)."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from llmclient import faultload
from ray_llm_eks.adapters import ports
from ray_llm_eks.adapters.ports import free_port
from rehearsal import faults, substitute, topology, verify
from rehearsal.checks import Check, by_flag, observability
from rehearsal.context import Context, RehearsalFailed, say
from rehearsal.ray_cluster import MULTI_NODE_ENV, MULTI_NODE_IP, Node

SETTLE = 15.0  # s of clean load before each fault: the window before must be all good
STALL = 20.0  # s the prefill engine stays stopped
ENGINE_BOUND = 600.0  # s: a replica's engine restart on 2 busy cores (1-4 min measured) with margin
LIGHT_BOUND = 180.0  # s: a replica without an engine, or a head whose engines survive


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    gated: bool  # 0 wrong/empty 200s required
    bound: float  # s until the endpoint serves again, at most


FAULTS = {
    f.name: f
    for f in (
        Fault("prefill-engine", "SIGKILL of the prefill engine process (VLLM::EngineCore)", True, ENGINE_BOUND),
        Fault("decode-engine", "SIGKILL of the decode engine process (VLLM::EngineCore)", True, ENGINE_BOUND),
        Fault("ingress-replica", "SIGKILL of the OpenAI ingress replica actor (Serve restarts it)", True, LIGHT_BOUND),
        Fault("kv-stall", f"SIGSTOP of the prefill engine for {STALL:g} s, then SIGCONT (KV path)", False,
              LIGHT_BOUND + STALL),
        Fault("head", "Ray head restarted: every process of the head node killed, `ray start --head` again",
              True, ENGINE_BOUND),
        Fault("serve-config", "serve config changed in place: decode's max_num_seqs lowered by one, submitted to "
              "the running app (what KubeRay does with a serveConfigV2 change)", True, ENGINE_BOUND),
    )
}  # fmt: skip


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--faults",
        metavar="LIST",
        nargs="?",
        const="all",
        help=f"inject faults under load (all, or a comma list of {', '.join(FAULTS)})",
    )
    parser.add_argument("--gcs-ft", choices=("off", "redis", "rocksdb"), default="off",
                        help="GCS fault tolerance of the head (with the head fault): off, redis, rocksdb")  # fmt: skip
    parser.add_argument("--faults-json", help="also write the fault table here (default: the run dir)")


def chosen(args: argparse.Namespace) -> list[Fault]:
    raw = getattr(args, "faults", None)
    if not raw:
        return []
    names = list(FAULTS) if raw == "all" else [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"--faults {raw}: unknown {unknown}; allowed: all or {', '.join(FAULTS)}")
    return [FAULTS[n] for n in names]


def _prepare(local, args: argparse.Namespace) -> list[str]:
    picked = chosen(args)
    if not local.pd and any(f.name in {"prefill-engine", "decode-engine", "kv-stall", "serve-config"} for f in picked):
        raise ValueError("--faults: the prefill/decode faults need a PD stack (dev, xpyd, tp)")
    if "head" in [f.name for f in picked] and args.gcs_ft == "redis" and not shutil.which("redis-server"):
        raise ValueError("--gcs-ft redis: no redis-server on PATH; install Debian's (apt-get install redis-server)")
    return [f"fault to inject: {f.name}: {f.what}" for f in picked]


def _nodes(args: argparse.Namespace, nodes: list[Node], run_id: str, run_dir) -> list[Node]:
    """With the head fault: the head (GCS store, no CPUs) and one worker node holding every replica."""
    if "head" not in [f.name for f in chosen(args)]:
        return nodes
    store = faults.gcs_store(args.gcs_ft, run_id, free_port(), secrets.token_hex(16), run_dir)
    args.gcs_store = store
    # Multi-node Ray on loopback: Ray clusters enabled (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1, Linux's default; the
    # rehearsal's "0" refuses a second node) and both nodes on 127.0.0.2 (rehearsal.ray_cluster.Node.ip).
    multi = MULTI_NODE_ENV
    head = Node("head", cpus=0, env={faults.NODE_MARKER: "head", **multi, **store.head_env}, ip=MULTI_NODE_IP)
    if args.gcs_ft == "redis":
        head.args = [f"--redis-password={store.head_env['REDIS_PASSWORD']}"]
    worker_port = free_port()
    args.worker_proxy = f"http://127.0.0.1:{worker_port}"
    # The worker's own Serve proxy port (Ray 2.58 serve/_private/constants.py RAY_SERVE_WORKER_PROXY_HTTP_PORT):
    # two proxies on one host, as the head pod's and a worker pod's behind the serve Service.
    worker_env = {faults.NODE_MARKER: "worker", "RAY_SERVE_WORKER_PROXY_HTTP_PORT": str(worker_port), **multi}
    worker_env |= store.worker_env
    worker = Node("worker", cpus=nodes[0].cpus, env=worker_env, ip=MULTI_NODE_IP)
    say(f"  - Ray: two nodes (head with 0 CPUs, worker with {worker.cpus}); GCS store: {store.description}")
    return [head, worker]


def _background_load(load: faultload.Load, stop: threading.Event, target: Callable[[], str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: asyncio.run(load.run(stop, target)), daemon=True)
    thread.start()
    return thread


def _healthy(ctx: Context) -> bool:
    application = verify.application(ctx.dashboard, ctx.app)
    if application.get("status") != "RUNNING":
        return False
    running = topology.running_replicas(application)
    return not topology.replica_mismatches(topology.expected_replicas(ctx.document), running)


def _recovered(ctx: Context, load: faultload.Load, t_inject: float, done_extra: Callable[[], bool]) -> bool:
    """Serving again: three good requests started after the last bad one (and after the injection), the app
    RUNNING with its replicas, and the fault's own condition (a new engine, the head back)."""
    after = [o for o in load.outcomes if o.start >= t_inject]
    bad = [o.start for o in after if o.outcome != faultload.OK]
    good = [o for o in after if o.outcome == faultload.OK and o.start > max(bad, default=t_inject)]
    return len(good) >= 3 and done_extra() and _healthy(ctx)


def _inject(ctx: Context, fault: Fault) -> tuple[Callable[[], bool], dict]:
    """Start the fault; returns (its own recovery condition, facts about it)."""
    run_id = ctx.run_id
    if fault.name in {"prefill-engine", "decode-engine"}:
        role = fault.name.split("-")[0]
        before = faults.engine_pids(run_id, role)
        if not before:
            raise RehearsalFailed(f"fault {fault.name}: no {role} engine process found")
        faults.send(before, signal.SIGKILL)
        return (lambda: bool(faults.engine_pids(run_id, role)) and not set(faults.engine_pids(run_id, role)) &
                set(before)), {"killed": before}  # fmt: skip
    if fault.name == "ingress-replica":
        before = faults.replica_pids(run_id, "Ingress")
        if not before:
            raise RehearsalFailed("fault ingress-replica: no ingress replica actor found")
        faults.send(before[:1], signal.SIGKILL)
        return (lambda: bool(set(faults.replica_pids(run_id, "Ingress")) - set(before))), {"killed": before[:1]}
    if fault.name == "kv-stall":
        engines = faults.with_children(faults.engine_pids(run_id, "prefill"))  # its workers hold NIXL
        faults.send(engines, signal.SIGSTOP)
        resumed = threading.Timer(STALL, lambda: faults.send(engines, signal.SIGCONT))
        resumed.start()
        return (lambda: not resumed.is_alive()), {"stopped": engines, "seconds": STALL}
    if fault.name == "head":
        return _restart_head(ctx)
    if fault.name == "serve-config":
        return _change_serve_config(ctx)
    raise RehearsalFailed(f"unknown fault {fault.name}")


def _restart_head(ctx: Context) -> tuple[Callable[[], bool], dict]:
    """Kill every process of the head node (the pod lost), start the head again on the same GCS and dashboard
    ports (KubeRay's head Service keeps its name). FT on: the worker's raylet reconnects and the engines keep
    their PIDs. FT off: the worker's raylet exits; as KubeRay would, the worker node is started again and the
    serve config re-submitted, and the engines load again."""
    ray = ctx.results["ray_cluster"]
    run_id, backend = ctx.run_id, ctx.args.gcs_ft
    engines = {role: faults.engine_pids(run_id, role) for role in ("prefill", "decode")}
    faults.kill_node(run_id, "head")
    t_killed = time.monotonic()
    head = ray.nodes[0]
    # The new head serves its metrics on the old head's port where it can: its dashboard agent dies on bind
    # ("Address already in use") while anything still holds that port, and a port of the ephemeral range can be
    # taken by any outgoing connection. (The old head's own agent, whose retitling can blank the environment that
    # names its node, is killed with the head: faults.node_pids follows parents.) Where the old port stays taken,
    # the head takes a new one and Prometheus is told, as a new pod's address would be found.
    moved = None
    for attempt in (1, 2):
        faults.forget_cluster_address(head.temp_dir)  # the lost pod's /tmp went with it
        if not ports.bindable(head.metrics_port, head.ip, cap=15.0):
            held = ", ".join(faults.port_holders(head.metrics_port)) or "no process found"
            moved = f"{head.metrics_port} -> {(port := ports.free_port())} (the old one held: {held})"
            say(f"head restart: metrics port {moved}")
            head.metrics_port = port
        done = subprocess.run(ray.command(head), env=ray.node_env(head), capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            break
        said = (done.stderr.strip().splitlines() or ["?"])[-1]
        if attempt == 2:
            raise RehearsalFailed(f"head restart: ray start failed twice; last: {said}")
        say(f"head restart: ray start failed ({said[:200]}); the head's processes ended, once more")
        faults.kill_node(run_id, "head")  # what the failed start left running
    if moved and callable(retarget := ctx.results.get("retarget")):
        retarget()
    facts = {"gcs_ft": backend, "engines_before": engines, "head_restart_s": round(time.monotonic() - t_killed, 1)}
    if moved:
        facts["metrics_port"] = moved
    if backend == "off":
        worker = ray.nodes[1]
        end = time.monotonic() + 120
        raylets = lambda: [p for p in faults.node_pids(run_id, "worker") if "raylet" in faults.title(p)]  # noqa: E731
        while raylets() and time.monotonic() < end:
            time.sleep(1)
        facts["worker_raylet_exited"] = not raylets()
        # The worker pod's container restarts: everything in it goes (re-parented engines included).
        faults.kill_node(run_id, "worker")
        done = subprocess.run(ray.command(worker), env=ray.node_env(worker), capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        if done.returncode != 0:
            raise RehearsalFailed("head restart (FT off): the worker node did not start again")
        from rehearsal.deploy import deploy
        from rehearsal.ray_cluster import wait_dashboard

        wait_dashboard(ctx.dashboard, cap=300)
        deploy(ctx.dashboard, ctx.document)  # KubeRay re-submits the serve config to a new head
    ctx.results.setdefault("faults_facts", {})["head"] = facts

    def back() -> bool:
        now = {role: faults.engine_pids(run_id, role) for role in ("prefill", "decode")}
        return all(now.values())

    return back, facts


def _decode_replicas(ctx: Context) -> set[str]:
    running = topology.running_replicas(verify.application(ctx.dashboard, ctx.app))
    return {r["replica_id"] for r in running.get("decode", [])}


def _change_serve_config(ctx: Context) -> tuple[Callable[[], bool], dict]:
    """An engine argument changed in the running app's serve config: Serve replaces decode's replicas (new
    engines), prefill's stay. The gap is what a serveConfigV2 change costs a role with one replica."""
    from rehearsal.deploy import deploy

    doc = copy.deepcopy(ctx.document)

    def fewer_seqs(role: str, config: dict) -> list[int] | None:
        """decode's max_num_seqs one lower: [before, after]."""
        if role != "decode":
            return None
        engine = config.setdefault("engine_kwargs", {})
        before_seqs = int(engine.get("max_num_seqs", 16))
        engine["max_num_seqs"] = max(1, before_seqs - 1)
        return [before_seqs, engine["max_num_seqs"]]

    seqs = substitute.edit_roles(doc, "rehearsal", fewer_seqs)["decode"]
    before = _decode_replicas(ctx)
    deploy(ctx.dashboard, doc)
    ctx.document = doc
    facts = {"decode max_num_seqs": seqs, "decode replicas before": sorted(before)}
    return (lambda: bool(_decode_replicas(ctx)) and not _decode_replicas(ctx) & before), facts


def _alerts(ctx: Context) -> list[str]:
    """The alerts firing now, where the rehearsal runs a Prometheus with our rules (obsmetrics puts a callable
    under ctx.results["alerts"]); empty otherwise."""
    firing = ctx.results.get("alerts")
    return list(firing()) if callable(firing) else []


def run_fault(ctx: Context, load: faultload.Load, fault: Fault) -> dict:
    t_settle = load.now()
    time.sleep(SETTLE)
    before = faultload.window("before", load.outcomes, t_settle, load.now())
    if before.outcomes[faultload.OK] != before.requests or not before.requests:
        bad = "; ".join(o for o in before.examples[:2])
        raise RehearsalFailed(f"before fault {fault.name}: the load was not all good: {before.outcomes} ({bad})")
    # After a prefill restart the decode replicas must start afresh by themselves (the prefill guard,
    # ray_llm_eks/serve_ingress/prefill_guard.py): which ran before, to tell.
    decode_before = _decode_replicas(ctx) if fault.name == "prefill-engine" else None
    t_inject = load.now()
    ctx.mark(f"fault {fault.name}: {fault.what}")
    condition, facts = _inject(ctx, fault)
    if decode_before is not None:
        own = condition
        condition = lambda: own() and bool(_decode_replicas(ctx)) and not _decode_replicas(ctx) & decode_before  # noqa: E731
    deadline = time.monotonic() + fault.bound
    while not _recovered(ctx, load, t_inject, condition):
        if time.monotonic() > deadline:
            break
        time.sleep(2.0)
    t_end = load.now()
    result = faultload.window(fault.name, load.outcomes, t_inject, t_end).as_dict()
    facts = dict(facts)
    if fault.name == "serve-config":
        facts["decode replicas after"] = sorted(_decode_replicas(ctx))
    if decode_before is not None:
        after = _decode_replicas(ctx)
        facts |= {"decode replicas before": sorted(decode_before), "decode replicas after": sorted(after)}
        facts["decode_restarted"] = bool(after) and not after & decode_before
    if fault.name == "head":
        facts["engines_after"] = {role: faults.engine_pids(ctx.run_id, role) for role in ("prefill", "decode")}
        facts["engines_survived"] = facts["engines_after"] == facts["engines_before"]
    result |= {"what": fault.what, "gated": fault.gated, "bound_s": fault.bound, "alerts": _alerts(ctx),
               "recovered": t_end - t_inject <= fault.bound and result["serving_again_s"] is not None,
               # Until Serve reports the app RUNNING with its replicas and the fault's own condition holds: it
               # can lag the caller's view (serving_again_s).
               "healthy_again_s": round(t_end - t_inject, 1),
               "facts": facts}  # fmt: skip
    ctx.mark(f"fault {fault.name}: {result['outcomes']}, serving again after {result['serving_again_s']} s")
    return result


def verdicts(rows: list[dict]) -> list[str]:
    """The gate, one line per failure: a wrong or empty 200 where the fault is gated, or no recovery in time."""
    problems = []
    for row in rows:
        bad = row["outcomes"][faultload.WRONG] + row["outcomes"][faultload.EMPTY]
        if row["gated"] and bad:
            problems.append(f"{row['fault']}: {bad} response(s) with status 200 and wrong or empty content")
        if not row["recovered"]:
            problems.append(f"{row['fault']}: the endpoint did not serve again within {row['bound_s']:g} s")
        facts = row.get("facts") or {}
        if facts.get("decode_restarted") is False:
            problems.append(f"{row['fault']}: the decode replicas did not start afresh after the prefill restart "
                            "(the prefill guard, ray_llm_eks/serve_ingress/prefill_guard.py, did not act)")  # fmt: skip
        if row["fault"] == "head" and facts.get("gcs_ft", "off") != "off" and not facts.get("engines_survived"):
            before, after = facts.get("engines_before"), facts.get("engines_after")
            problems.append(f"head: with GCS fault tolerance ({facts['gcs_ft']}) the engines did not survive the head "
                            f"restart (engine PIDs before {before}, after {after})")  # fmt: skip
    return problems


def table(rows: list[dict]) -> str:
    head = f"{'fault':<16} {'reqs':>5} {'ok':>4} {'failed (codes)':<22} {'cut':>4} {'wrong':>5} {'empty':>5} " \
           f"{'serving again':>13} {'slowest ok':>10}  alert"  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        o = r["outcomes"]
        codes = ",".join(f"{k}x{v}" for k, v in sorted(r["http_codes"].items())) or "-"
        again = "never" if r["serving_again_s"] is None else f"{r['serving_again_s']:.1f} s"
        slowest = "-" if r.get("slowest_ok_s") is None else f"{r['slowest_ok_s']:.1f} s"
        gate = "" if r["gated"] else " (not gated)"
        lines.append(
            f"{r['fault']:<16} {r['requests']:>5} {o['ok']:>4} {str(o['failed']) + ' (' + codes + ')':<22} "
            f"{o['cut']:>4} {o['wrong']:>5} {o['empty']:>5} {again:>13} {slowest:>10}  {', '.join(r['alerts']) or '-'}"
            f"{gate}"
        )
    return "\n".join(lines)


def _run(ctx: Context) -> None:
    picked = chosen(ctx.args)
    refs = asyncio.run(faultload.reference(ctx.url, ctx.model, ctx.api_key))
    clear = [r for r in refs if r.expected()]
    for r in clear:
        margins = " ".join(f"{m:.3f}" for m in r.margins[:6])
        say(f"  reference {r.prompt!r}: {faultload.clear_prefix(r.margins)} of {len(r.tokens)} tokens clear "
            f"(margin >= {faultload.DEFAULT_MARGIN} nats; first margins {margins})")  # fmt: skip
    say(f"  {len(clear)} of {len(refs)} prompts have a clear first token: the load uses those")
    if not clear:
        raise RehearsalFailed("faults: no prompt has a clear first token on the stand-in model: nothing to compare")
    load = faultload.Load(ctx.url, ctx.model, clear, ctx.api_key, concurrency=2)
    worker_proxy = getattr(ctx.args, "worker_proxy", None)
    use_worker = threading.Event()
    stop = threading.Event()
    thread = _background_load(load, stop, lambda: worker_proxy if use_worker.is_set() else ctx.url)
    rows = []
    try:
        for fault in picked:
            if fault.name == "head" and worker_proxy:
                use_worker.set()  # the serve Service keeps routing to the worker pod's proxy
            rows.append(run_fault(ctx, load, fault))
    finally:
        stop.set()
        thread.join(timeout=200)
    say("\nFaults (requests that ended after the injection and started before recovery):")
    say(table(rows))
    for row in rows:
        for example in row["examples"]:
            say(f"  {row['fault']}: {example}")
        if row["facts"]:
            say(f"  {row['fault']}: {json.dumps(row['facts'])}")
    out = ctx.args.faults_json or str(ctx.run_dir / "faults.json")
    with open(out, "w") as f:
        json.dump({"stack": ctx.args.stack, "gcs_ft": ctx.args.gcs_ft, "faults": rows}, f, indent=1)
    say(f"saved {out}")
    ctx.results["faults"] = rows
    ctx.timeline.append(f"faults injected: {', '.join(r['fault'] for r in rows)} (table above)")
    if problems := verdicts(rows):
        raise RehearsalFailed("faults: " + "; ".join(problems))
    if ctx.pd and any(f.name in ENGINE_FAULTS for f in picked):
        _verify_after_restart(ctx)


# A restarted engine has a new NIXL agent: decode must read KV from it, not from the agent it met first.
ENGINE_FAULTS = ("prefill-engine", "decode-engine")


def _verify_after_restart(ctx: Context) -> None:
    """`make verify` again once the engines were replaced: every request's KV still moves, now between the new
    engine and its peer (a stale NIXL handshake fails here, or fails silently in the engines' own counters)."""
    code, lines = observability.run_verify(ctx)
    if code != 0:
        failed = next((x for x in lines if x.startswith("VERIFY FAILED")), f"make verify exited {code}")
        raise RehearsalFailed(f"faults: after the engine restart, {failed}")
    ctx.timeline.append("make verify after the engine restart: every request's KV moved")


FAULTS_CHECK = Check(
    "faults",
    _run,
    selected=by_flag("faults"),
    options=_options,
    prepare=_prepare,
    nodes=_nodes,
)
