"""`make rehearse STACK=<stack>`: render the stack's serveConfigV2 with the project's own code, change
only what cannot exist on a CPU (printed), start Ray on this machine (loopback), deploy, wait for ready,
run the smoke client, print a timeline, and end every process it started, on success, failure and
Ctrl-C. An engine failure is printed once, as the engine's own error line, found in Ray's logs.

Runs in the rehearsal venv from the repository root (`python -m rehearsal.run`, see Makefile); the
entry point keeps its `__main__` guard (vLLM spawns processes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import yaml

from adapters import stack as stack_adapter
from domain import model_fit, serve_config
from llmclient import bench, smoke
from rehearsal import cpu_threads, scale_demo, substitute, topology, verify
from rehearsal.verify import http_json

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("RAY_LLM_EKS_CACHE", Path.home() / ".cache" / "ray-llm-eks"))
MARKER = "RAY_LLM_EKS_REHEARSAL"  # env var every process of one rehearsal inherits: how we find them
POLL = 2.0  # seconds between status polls
IDLE_WINDOW = 5.0  # seconds of CPU sampling with no request in flight, once every replica runs
# A first PD request on 2 busy cores (NIXL handshake, then the transfer) can take tens of seconds.
SMOKE_TIMEOUT = 180.0
# Exception lines that only wrap the real error (the engine's own message is logged before them), or Ray's
# own symptoms of it (GetTimeoutError: a replica's call waited on an engine that never came up).
WRAPPERS = re.compile(
    r"Engine core initialization failed|See root cause above|EngineDeadError|RayTaskError|ActorDiedError|"
    r"DeploymentUnavailableError|RayActorError|ActorUnavailableError|failed to start \d+ times|"
    r"KeyboardInterrupt|CancelledError|asyncio\.exceptions|GetTimeoutError"
)
EXC_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b(?:\(\w+\))?:? ?.*)$")
# Prefixes before a logged line: Ray's "(Worker pid=1) " and vLLM's "ERROR 11-30 14:23:51 [file.py:901] ".
PREFIXES = re.compile(
    r"^(?:\(\w+ pid=\d+[^)]*\) ?)?(?:(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d [\d:]+ \[[^\]]+\] ?)?"
)
# A fatal engine start, as soon as it is logged (Serve itself retries the replica for minutes).
# The headers under which a failure's cause is printed (rehearsal.mistakes looks for them).
ENGINE_HEADER = "ENGINE ERROR (from Ray's logs, root cause first):"
ROLE_HEADER = "KV ROLE ERROR (checked by the rehearsal before deploying: no engine reports it):"
# What vLLM's NIXL connector logs when a KV read fails (nixl/base_worker.py _log_failure).
NIXL_FAILURE = r"NIXL transfer failure: "
FATAL = re.compile(r"Engine core initialization failed|EngineCore failed to start|Traceback \(most recent call last\)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(text: str) -> None:
    print(text, flush=True)


class Clock:
    def __init__(self):
        self.start = time.monotonic()
        self.events: list[tuple[float, str]] = []
        self.loads: list[float] = []  # 1-minute load average, sampled at each event and status poll

    def now(self) -> float:
        self.loads.append(os.getloadavg()[0])
        return time.monotonic() - self.start

    def mark(self, what: str) -> float:
        t = self.now()
        self.events.append((t, what))
        say(f"[{t:7.1f} s] {what}")
        return t


# ---------------------------------------------------------------- rendering and substitution


def rendered_document(stack: str) -> dict:
    return stack_adapter.load_settings(stack_adapter.stack_file(stack)).serving.serve_document


def stand_in_family(doc: dict) -> str:
    """The stand-in for the served model's family (domain/model_fit.py's table), or by its layer kinds."""
    loading = next(iter(serve_config.llm_configs_by_role(doc, "rehearsal").values()))["model_loading_config"]
    spec = model_fit.KNOWN_MODELS.get(loading.get("model_source")) or model_fit.KNOWN_MODELS.get(loading["model_id"])
    if spec is None:
        return substitute.stand_in(None, False)
    return substitute.stand_in(spec.family.name if spec.family else None, spec.hybrid)


def model_dir(family: str) -> Path:
    return CACHE / "rehearsal-models" / family


def make_model(family: str, max_len: int) -> Path:
    out = model_dir(family)
    subprocess.run(
        [sys.executable, str(ROOT / "rehearsal" / "tiny_model.py"), family, str(out), str(max_len)], check=True
    )
    return out


def physical_cores(sys_node: Path = Path("/sys/devices/system/node/node0")) -> tuple[int, ...]:
    """The physical cores of the first NUMA node, each named by the lowest id of its hyper-thread siblings
    (as vllm/platforms/cpu.py discover_numa_topology names them)."""
    cores = set()
    for cpu in sys_node.glob("cpu[0-9]*"):
        try:
            siblings = (cpu / "topology" / "thread_siblings_list").read_text().strip()
        except OSError:
            siblings = cpu.name[3:]
        ids = [int(x) for part in siblings.split(",") for x in part.split("-")[:1]]
        cores.add(min(ids))
    return tuple(sorted(cores)) or tuple(sorted(os.sched_getaffinity(0)))


def nixl_pinned_core(sys_node: Path = Path("/sys/devices/system/node/node0")) -> int:
    """The core vLLM 0.26's NixlConnector pins a CPU engine's main thread to: the highest physical core of the
    first NUMA node (nixl/base_worker.py:382-395)."""
    return max(physical_cores(sys_node))


# ---------------------------------------------------------------- processes


def our_pids(run_id: str) -> list[int]:
    """Every process carrying this rehearsal's marker in its environment (re-parented ones included)."""
    needle = f"{MARKER}={run_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def end_processes(run_id: str, grace: float = 10.0) -> int:
    pids = our_pids(run_id)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + grace
        while time.monotonic() < end and (pids := our_pids(run_id)):
            time.sleep(0.5)
        if not pids:
            break
    return len(our_pids(run_id))


# ---------------------------------------------------------------- Ray's logs


def root_errors(log_dir: Path, limit: int = 3) -> list[str]:
    """The distinct exception lines of Ray's logs, wrappers last; each with the file it is in."""
    found: dict[str, tuple[int, str]] = {}
    if not log_dir.exists():
        return []
    files = sorted(
        (p for p in log_dir.rglob("*") if p.is_file() and p.suffix in {".err", ".out", ".log"}), key=os.path.getmtime
    )
    for order, path in enumerate(files):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "Error" not in text and "Exception" not in text:
            continue
        lines = [PREFIXES.sub("", line, count=1) for line in text.splitlines()]
        for i, line in enumerate(lines):
            if "Traceback (most recent call last)" not in line:
                continue
            # The exception line closes the traceback: the first non-indented line that names one.
            for follow in lines[i + 1 : i + 400]:
                m = EXC_LINE.match(follow)
                if m and not follow.startswith(("  ", "\t")):
                    message = m.group(1).strip()
                    # pydantic and others carry the real reason on the indented lines after it.
                    at = lines.index(follow, i + 1)
                    for more in lines[at + 1 : at + 3]:
                        if not more.startswith(("  ", "\t")) or more.strip().startswith(("File ", "For further")):
                            break
                        message += " | " + more.strip()
                    found.setdefault(message, (order, path.name))
                    break
    # Engines log through Ray's workers (worker-*.out/err); Ray's own daemons come after them (a dashboard
    # port clash on a busy machine is not what failed the rehearsal).
    ranked = sorted(
        found.items(),
        key=lambda kv: (bool(WRAPPERS.search(kv[0])), not kv[1][1].startswith("worker-"), kv[1][0]),
    )
    return [f"{msg}    [{where}]" for msg, (_, where) in ranked[:limit]]


def fatal_logged(log_dir: Path) -> bool:
    """An engine failed to start: Serve would retry the replica for minutes, the error stays the same."""
    if not log_dir.exists():
        return False
    for path in [*log_dir.glob("worker-*.err"), *log_dir.glob("serve/controller_*.log")]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "Engine core initialization failed" in text or "Exception in Replica(" in text:
            return True
    return False


def grep_logs(log_dir: Path, pattern: str) -> list[str]:
    hits = []
    rx = re.compile(pattern)
    for path in log_dir.rglob("*") if log_dir.exists() else []:
        if path.is_file() and path.suffix in {".err", ".out", ".log"}:
            try:
                hits += [line.strip() for line in path.read_text(errors="replace").splitlines() if rx.search(line)]
            except OSError:
                continue
    return hits


# ---------------------------------------------------------------- Serve REST API


class RehearsalFailed(RuntimeError):
    pass


def wait_ready(
    dashboard: str, app: str, clock: Clock, log_dir: Path, cap: float, replica_ready: dict[str, float] | None = None
) -> dict[str, float]:
    """Poll Serve until the app runs; returns role -> seconds to healthy, and fills `replica_ready` (replica
    id -> seconds to RUNNING). Fails fast on an engine error."""
    healthy: dict[str, float] = {}
    replica_ready = {} if replica_ready is None else replica_ready
    seen: dict[str, str] = {}
    end = time.monotonic() + cap
    while True:
        application = verify.application(dashboard, app)
        for name, dep in (application.get("deployments") or {}).items():
            state = dep.get("status", "?")
            if seen.get(name) != state:
                seen[name] = state
                t = clock.mark(f"deployment {name}: {state}")
                if state == "HEALTHY":
                    healthy.setdefault(topology.role_of(name), t)
            for replica in dep.get("replicas") or []:
                if replica.get("state") == "RUNNING" and replica["replica_id"] not in replica_ready:
                    rid = replica["replica_id"]
                    replica_ready[rid] = clock.mark(f"replica {name} {rid}: RUNNING")
        clock.now()
        app_state = application.get("status")
        if app_state == "RUNNING":
            return healthy
        if app_state in {"DEPLOY_FAILED", "UNHEALTHY"}:
            raise RehearsalFailed(f"application {app}: {app_state}: {application.get('message', '')[:2000]}")
        if fatal_logged(log_dir):
            raise RehearsalFailed("a replica failed to start (its engine's error is below)")
        if time.monotonic() > end:
            raise RehearsalFailed(f"not ready within {cap:g} s (application status {app_state})")
        time.sleep(POLL)


# ---------------------------------------------------------------- the run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rehearse")
    parser.add_argument("--stack", required=True)
    parser.add_argument("--mutate", action="append", default=[], choices=sorted(substitute.MUTATIONS))
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="deploy to ready, at most (s)")
    parser.add_argument("--keep", action="store_true", help="leave it running (stop: make rehearse-stop)")
    parser.add_argument("--bench", type=Path, help="after the smoke, a short bench saved to this JSON file")
    parser.add_argument("--port", type=int, default=0, help="HTTP port of the endpoint (default: a free one)")
    parser.add_argument(
        "--scale-demo", metavar="ROLE", help="lower ROLE's target_ongoing_requests, hold streams, see Serve scale it"
    )
    args = parser.parse_args(argv)

    clock = Clock()
    try:
        plan = prepare(args)
    except substitute.CannotRehearse as exc:
        say(f"REHEARSAL REFUSED (not on this machine): {exc}")
        return 2
    except KeyboardInterrupt:  # a child (the stand-in's build) may still be ending: nothing else had started
        say("\ninterrupted while preparing the serve config and the stand-in model (no Ray process had started)")
        return 130
    if plan is None:
        return 1
    doc = plan.document
    clock.mark("serve config rendered and substituted; stand-in model ready")

    run_id = uuid.uuid4().hex[:12]
    # Ray's session dir holds unix sockets: keep the path short.
    temp_dir = Path(f"/tmp/rllm-{run_id}")
    run_dir = CACHE / "rehearsal-runs" / args.stack
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "serve-config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    gcs, dash, metrics = free_port(), free_port(), free_port()
    # Ray's logical CPUs, above the 2 real cores, so that every replica schedules (the scale demo's one more).
    cpus = topology.logical_cpus(doc, {args.scale_demo: 1} if args.scale_demo else None)
    env = dict(os.environ)
    env.update(
        {
            MARKER: run_id,
            "HF_HUB_OFFLINE": "1",  # no hub: the stand-in is local
            "TRANSFORMERS_OFFLINE": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_metrics_report_interval_ms": "2000",  # metrics show the smoke's requests within seconds
            "PYTHONUNBUFFERED": "1",
            # Ray on loopback: it resolves 127.0.0.1 to the host's network address unless told it runs
            # a single-node "Windows/OSX" cluster (ray/_private/services.py get_node_ip_address).
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # The dashboard gives each of its module processes 30 s to start (ray/dashboard/consts.py); on 2
            # busy cores (load 15) MetricsHead took longer and the dashboard, so the deploy API, never came up.
            "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": "180",
        }
    )
    if plan.hybrid:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT / "rehearsal" / "amx_hidden"), env.get("PYTHONPATH")])
        )
    if plan.pd:
        logging_config = run_dir / "vllm-logging.json"
        logging_config.write_text(json.dumps(topology.vllm_logging_config(), indent=1))
        env["VLLM_LOGGING_CONFIG_PATH"] = str(logging_config)
    log_dir = temp_dir / "session_latest" / "logs"
    dashboard = f"http://127.0.0.1:{dash}"
    url = f"http://127.0.0.1:{doc['http_options']['port']}"
    stopped = False

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    ok = False
    try:
        ray = Path(sys.executable).parent / "ray"
        start = [
            str(ray), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
            "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--metrics-export-port={metrics}",
            f"--num-cpus={cpus}", f"--temp-dir={temp_dir}", "--disable-usage-stats",
            # Ports of our own, so that another Ray on this machine (defaults) never clashes.
            f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}", f"--ray-client-server-port={free_port()}",
        ]  # fmt: skip
        start_ray(start, env, run_id, clock)
        clock.mark(f"Ray started (dashboard {dashboard}, logs {log_dir})")
        wait_dashboard(dashboard)
        http_json("PUT", f"{dashboard}/api/serve/applications/", doc, timeout=60)
        t_deploy = clock.mark("serve config submitted")
        app = doc["applications"][0]["name"]
        replica_ready: dict[str, float] = {}
        healthy = wait_ready(dashboard, app, clock, log_dir, args.ready_timeout, replica_ready)
        clock.mark(f"application {app} RUNNING at {url}")
        running = check_replicas(doc, verify.application(dashboard, app))
        counts = ", ".join(f"{role} {len(reps)}" for role, reps in running.items())
        clock.mark(f"RUNNING replicas per role as the serve config asks: {counts}")
        quiet = measure_threads(run_id, asyncio.sleep(IDLE_WINDOW))
        result = asyncio.run(
            smoke.run(
                url,
                plan.model_ids[0],
                timeout=SMOKE_TIMEOUT,
                deadline=SMOKE_TIMEOUT * 2,
                metrics_url=f"http://127.0.0.1:{metrics}/metrics",
                expect_pd=plan.pd,
            )
        )
        for line in result.lines:
            say(f"  smoke: {line}")
        t_first = clock.mark("smoke passed")
        if plan.pd:
            check_nixl(log_dir)
        metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        concurrency = max([2, *(len(reps) for reps in running.values())])
        spread, loaded, per_process = measure_threads(
            run_id, verify.serve_every_replica(url, plan.model_ids[0], metrics_url, running, concurrency)
        )
        served, sent, errors = spread
        clock.mark(f"{sent} more requests, {concurrency} at a time; requests per replica so far: {served}")
        if errors:
            raise RehearsalFailed(f"{len(errors)} of {sent} requests failed; first: {errors[0]}")
        if unserved := topology.idle_replicas(running, served):
            raise RehearsalFailed(f"after {sent} requests, replicas that served none: {', '.join(unserved)}")
        for window, busy in (("idle", quiet[1]), ("under load", loaded)):
            for line in cpu_threads.describe(busy):
                say(f"  busy thread ({window}): {line}")
            if pairs := cpu_threads.pinned_pairs(busy):
                raise RehearsalFailed(f"two busy threads of one engine on one core ({window}): {pairs[0]}")
        if (tp := topology.tensor_parallel_size(doc)) > 1:
            ranks = topology.rank_seconds(per_process)
            clock.mark("CPU seconds per TP rank during those requests: " + ", ".join(
                f"rank {rank} {seconds:.2f} s" for rank, seconds in sorted(ranks.items())))  # fmt: skip
            if lazy := topology.idle_ranks(ranks, tp):
                raise RehearsalFailed(f"tensor parallel {tp}: {'; '.join(lazy)}")
        kv = verify.kv_sources(log_dir, running) if plan.pd else ({}, Counter())
        if plan.pd:
            check_nixl(log_dir)  # again: the later requests reached the other prefill replicas
            if unread := topology.prefills_not_read(*kv):
                raise RehearsalFailed(f"KV not transferred from every prefill replica: {'; '.join(unread)}")
        if args.scale_demo:
            role = args.scale_demo
            streams = 2 * max(topology.expected_replicas(doc).values())
            (start, now), held, _ = measure_threads(
                run_id, scale_demo.hold_until_scaled(url, plan.model_ids[0], dashboard, app, role, streams, clock.mark)
            )
            for line in cpu_threads.describe(held):
                say(f"  busy thread ({streams} held streams): {line}")
            if pairs := cpu_threads.pinned_pairs(held):
                raise RehearsalFailed(f"two busy threads of one engine on one core (held streams): {pairs[0]}")
            if problems := topology.scaled_alone(start, now, role):
                raise RehearsalFailed(f"scale demo: {'; '.join(problems)} (targets {start} -> {now})")
            wait = scale_demo.wait_running(dashboard, app, role, now[role], clock.mark, args.ready_timeout)
            if asyncio.run(wait) is None:
                raise RehearsalFailed(f"scale demo: Serve raised {role} to {now[role]} but it did not run in time")
        if args.bench:
            summary = asyncio.run(
                bench.run(
                    bench.BenchConfig(
                        url=url,
                        concurrency=2,
                        requests=8,
                        prompt_words=64,
                        max_tokens=32,
                        time_cap=240,
                        ignore_eos=True,
                    )
                )
            )
            say(bench.table(summary))
            args.bench.write_text(json.dumps(summary, indent=2) + "\n")
            say(f"saved {args.bench}")
            if summary["failed"]:
                raise RehearsalFailed(f"bench: {summary['failed']} requests failed")
        say("\nTimeline (seconds since start):")
        for line in role_lines(healthy, running, replica_ready, served, kv, t_deploy):
            say(f"  {line}")
        say(f"  first token (streamed smoke) {result.ttft:.3f} s after sending")
        say(f"  smoke passed                 {t_first:6.1f} s")
        say(f"  total                        {clock.now():6.1f} s")
        loads = clock.loads
        say(f"  load average (1 min) during the run: min {min(loads):.1f}, mean {sum(loads) / len(loads):.1f}, "
            f"max {max(loads):.1f} ({len(loads)} samples)")  # fmt: skip
        ok = True
        if args.keep:
            (CACHE / "rehearsal-runs" / "running").write_text(f"{run_id} {url} {temp_dir}\n")
            say(f"\nLeft running at {url} (Ray metrics http://127.0.0.1:{metrics}/metrics). Stop: make rehearse-stop")
            stopped = True
        return 0
    except RehearsalFailed as exc:
        say(f"\nREHEARSAL FAILED: {str(exc)[:600]}")
        report_errors(log_dir)
        return 1
    except smoke.SmokeError as exc:
        say(f"\nREHEARSAL FAILED (smoke): {exc}")
        report_errors(log_dir)
        return 1
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    finally:
        if not stopped:
            left = end_processes(run_id)
            say(f"stopped every process of this rehearsal{'' if not left else f' but {left}'}")
            if ok or not os.environ.get("KEEP_RAY_LOGS"):
                shutil.rmtree(temp_dir, ignore_errors=True)
            else:
                say(f"Ray logs kept in {temp_dir}")


def prepare(args) -> substitute.Plan | None:
    """Render, substitute (printed), build the stand-in: nothing runs yet. None: a kv_role mistake (printed)."""
    rendered = rendered_document(args.stack)
    configs = serve_config.llm_configs_by_role(rendered, "rehearsal")
    max_len = max(int(c.get("engine_kwargs", {}).get("max_model_len", 4096)) for c in configs.values())
    family = stand_in_family(rendered)
    port = args.port or free_port()
    cores = physical_cores()
    plan = substitute.plan(rendered, str(model_dir(family)), family, port, nixl_core=max(cores), cores=cores)
    make_model(family, max_len)
    kind = "prefill/decode" if plan.pd else "collocated"
    say(f"Stack {args.stack}: {kind}, model {plan.model_ids[0]}; substitutions:")
    for line in plan.substitutions:
        say(f"  - {line}")
    say("  - Ray: one node on 127.0.0.1, CPUs only (NIXL side channel on 127.0.0.1; UCX picks its transports)")
    if plan.hybrid:
        say("  - process env: AMX hidden from vLLM's CPU platform (rehearsal/amx_hidden/sitecustomize.py)")
    if plan.pd:
        say(f"  - process env: VLLM_LOGGING_CONFIG_PATH (vLLM's format, plus DEBUG for {topology.PULL_WORKER_LOGGER}"
            ": it names the prefill engine of each KV read)")  # fmt: skip
    for mutation in args.mutate:
        say(f"  ! {substitute.mutate(plan.document, mutation)}")
    if args.scale_demo:
        try:
            say(f"  - {substitute.scale_demo(plan.document, args.scale_demo)}")
        except ValueError as exc:
            raise substitute.CannotRehearse(str(exc)) from None
    if wrong_roles := substitute.role_mistakes(plan.document):
        say(f"\nREHEARSAL FAILED: kv_role on the wrong side\n{ROLE_HEADER}")
        for line in wrong_roles:
            say(f"  {line}")
        return None
    return plan


def check_nixl(log_dir: Path) -> None:
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


def measure_threads(run_id: str, work) -> tuple:
    """Run the coroutine `work`, sampling this rehearsal's threads around it: (its result, busy threads,
    CPU seconds per process)."""
    before, start = cpu_threads.sample(our_pids(run_id)), time.monotonic()
    result = asyncio.run(work)
    after = cpu_threads.sample(our_pids(run_id))
    elapsed = time.monotonic() - start
    return result, cpu_threads.busy(before, after, elapsed), cpu_threads.process_seconds(before, after)


def role_lines(healthy, running, replica_ready, served, kv, t_deploy) -> list[str]:
    """Per role: when its engines were ready, each replica's ready time and requests, KV reads per prefill."""
    engines, reads = kv
    lines = []
    for role, t in sorted(healthy.items(), key=lambda item: item[1]):
        if role == "ingress":
            continue
        replicas = running.get(role, [])
        lines.append(f"engine {role:<10} ready after {t - t_deploy:6.1f} s from deploy; {len(replicas)} replica(s):")
        for r in replicas:
            rid = r["replica_id"]
            line = f"    {rid}: RUNNING {replica_ready.get(rid, t) - t_deploy:6.1f} s, served {served.get(rid, 0):g}"
            if role == "prefill":
                engine = engines.get(rid)
                line += f", KV read by decode {reads.get(engine or '', 0)} time(s) (engine {engine})"
            lines.append(line)
    return lines


def start_ray(command: list[str], env: dict, run_id: str, clock: Clock, attempts: int = 2) -> None:
    """`ray start`, once more if it fails: on 2 busy cores the raylet can miss Ray's fixed 30 s to register
    with the GCS ("The current node timed out during startup", ray/_private/node.py)."""
    for attempt in range(1, attempts + 1):
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
            reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        except subprocess.TimeoutExpired:
            done, reason = None, "no answer within 180 s"
        if done is not None and done.returncode == 0:
            return
        end_processes(run_id)
        clock.mark(f"ray start failed (attempt {attempt} of {attempts}): {reason[:300]}")
    raise RehearsalFailed(f"ray start failed {attempts} times; last: {reason[:300]}")


def wait_dashboard(dashboard: str, cap: float = 120.0) -> None:
    end = time.monotonic() + cap
    while True:
        try:
            http_json("GET", f"{dashboard}/api/serve/applications/", timeout=5)
            return
        except (urllib.error.URLError, OSError, ValueError):
            if time.monotonic() > end:
                raise RehearsalFailed(f"Ray dashboard not answering at {dashboard} within {cap:g} s") from None
            time.sleep(1.0)


def report_errors(log_dir: Path) -> None:
    errors = root_errors(log_dir)
    if not errors:
        say(f"(no exception found in Ray's logs at {log_dir})")
        return
    say(ENGINE_HEADER)
    for line in errors:
        say(f"  {line[:1500]}")


def stop_kept() -> int:
    marker = CACHE / "rehearsal-runs" / "running"
    if not marker.exists():
        say("no rehearsal left running")
        return 0
    run_id, _url, temp_dir = marker.read_text().split()
    left = end_processes(run_id)
    shutil.rmtree(temp_dir, ignore_errors=True)
    marker.unlink()
    say(f"stopped rehearsal {run_id}" + (f" ({left} processes survived)" if left else ""))
    return 1 if left else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stop"]:
        sys.exit(stop_kept())
    sys.exit(main())
