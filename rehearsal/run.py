"""`make rehearse STACK=<stack>`: the stack's serve config, run for real on this machine, in phases:

1. prepare (rehearsal.prepare): render with the project's own code, change only what cannot exist here
   (printed), build the stand-in model;
2. start Ray on loopback (rehearsal.ray_cluster);
3. deploy and 4. wait until the application runs (rehearsal.deploy), failing fast on an engine error;
5. the checks, in order, on the same running engines (rehearsal.checks: smoke, replicas, threads, KV reads,
   and those chosen through ARGS);
6. the timeline, then the end of every process it started, on success, failure and Ctrl-C.

An engine failure is printed once, as the engine's own error line, found in Ray's logs. Runs in the
rehearsal venv from the repository root (`python -m rehearsal.run`, see Makefile); the entry point keeps
its `__main__` guard (vLLM spawns processes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import uuid
from pathlib import Path

import yaml

from llmclient import smoke
from rehearsal import checks, substitute, topology
from rehearsal.context import Clock, Context, RehearsalFailed, say
from rehearsal.deploy import deploy, wait_ready
from rehearsal.logs import report_errors
from rehearsal.prepare import CACHE, ROOT, prepare, stack_run_dir
from rehearsal.processes import end_processes, free_port
from rehearsal.ray_cluster import Cluster, Node, base_environment, cluster, start_node, wait_dashboard


def parser_for(all_checks: list[checks.Check]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rehearse")
    parser.add_argument("--stack", required=True)
    parser.add_argument("--mutate", action="append", default=[], choices=sorted(substitute.MUTATIONS))
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="deploy to ready, at most (s)")
    parser.add_argument("--keep", action="store_true", help="leave it running (stop: make rehearse-stop)")
    parser.add_argument("--port", type=int, default=0, help="HTTP port of the endpoint (default: a free one)")
    checks.add_options(parser, all_checks)
    return parser


def cpu_nodes(
    doc: dict, chosen: list[checks.Check], args: argparse.Namespace, run_id: str, run_dir: Path
) -> list[Node]:
    """One Ray node; its logical CPUs above the real cores, so that every replica schedules (a check's
    added replicas too: the scale demo's one more). A check may lay the nodes out otherwise (the head fault)."""
    added: dict[str, int] = {}
    for check in chosen:
        if check.replicas_added is not None:
            for role, n in check.replicas_added(args).items():
                added[role] = added.get(role, 0) + n
    nodes = [Node("head", cpus=topology.logical_cpus(doc, added or None))]
    for check in chosen:
        if check.nodes is not None:
            nodes = check.nodes(args, nodes, run_id, run_dir)
    return nodes


def cpu_environment(plan: substitute.Plan, run_id: str, run_dir: Path) -> dict[str, str]:
    env = base_environment(run_id)
    if plan.hybrid:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT / "rehearsal" / "amx_hidden"), env.get("PYTHONPATH")])
        )
    if plan.pd:
        logging_config = run_dir / "vllm-logging.json"
        logging_config.write_text(json.dumps(topology.vllm_logging_config(), indent=1))
        env["VLLM_LOGGING_CONFIG_PATH"] = str(logging_config)
    return env


def main(argv: list[str] | None = None) -> int:
    all_checks = checks.all_checks()
    args = parser_for(all_checks).parse_args(argv)
    chosen = checks.selected(all_checks, args)

    clock = Clock()
    try:
        prepared = prepare(args, chosen, args.port or free_port())
    except substitute.CannotRehearse as exc:
        say(f"REHEARSAL REFUSED (not on this machine): {exc}")
        return 2
    except KeyboardInterrupt:  # a child (the stand-in's build) may still be ending: nothing else had started
        say("\ninterrupted while preparing the serve config and the stand-in model (no Ray process had started)")
        return 130
    if prepared is None:
        return 1
    plan = prepared.plan
    doc = plan.document
    clock.mark("serve config rendered and substituted; stand-in model ready")

    run_id = uuid.uuid4().hex[:12]
    run_dir = stack_run_dir(args.stack)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "serve-config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    ray = cluster(cpu_nodes(doc, chosen, args, run_id, run_dir), run_id, cpu_environment(plan, run_id, run_dir))
    ctx = Context(
        args=args,
        document=doc,
        url=f"http://127.0.0.1:{doc['http_options']['port']}",
        api_key=prepared.api_key,
        model=plan.model_ids[0],
        pd=plan.pd,
        dashboard=ray.dashboard,
        metrics_urls=ray.metrics_urls,
        log_dir=ray.log_dir,
        run_dir=run_dir,
        run_id=run_id,
        clock=clock,
        app=doc["applications"][0]["name"],
    )
    ctx.results["ray_cluster"] = ray  # the head fault restarts its nodes

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    ok = stopped = False
    try:
        start(ray, ctx)
        deploy(ctx.dashboard, doc)
        ctx.t_deploy = clock.mark("serve config submitted")
        later = ray.later()

        def on_healthy(role: str) -> None:
            if role in later:
                start_node(ray, later.pop(role), run_id, clock)
                clock.mark(f"Ray node {ray.nodes[-1].name} added once {role} was healthy")

        ctx.healthy = wait_ready(
            ctx.dashboard, ctx.app, clock, ctx.log_dir, args.ready_timeout, ctx.replica_ready, on_healthy
        )
        clock.mark(f"application {ctx.app} RUNNING at {ctx.url}")
        checks.run_all(ctx, chosen)
        print_timeline(ctx)
        ok = True
        if args.keep:
            (CACHE / "rehearsal-runs" / "running").write_text(f"{run_id} {ctx.url} {ray.temp_dir}\n")
            key = f"OPENAI_API_KEY=$(cat {prepared.keys_file}) " if prepared.keys_file else ""
            say(f"\nLeft running at {ctx.url} (Ray metrics {ctx.metrics_url}): {key}make smoke URL={ctx.url}. "
                "Stop: make rehearse-stop")  # fmt: skip
            stopped = True
        return 0
    except RehearsalFailed as exc:
        say(f"\nREHEARSAL FAILED: {str(exc)[:600]}")
        report_errors(ctx.log_dir)
        return 1
    except smoke.SmokeError as exc:
        say(f"\nREHEARSAL FAILED (smoke): {exc}")
        report_errors(ctx.log_dir)
        return 1
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    finally:
        if not stopped:
            teardown(ray, run_id, ok)


def start(ray: Cluster, ctx: Context) -> None:
    """The nodes that start before deploy (the others wait for a role: Node.after_role)."""
    for node in ray.nodes:
        if node.after_role is None:
            start_node(ray, node, ctx.run_id, ctx.clock)
    ctx.mark(f"Ray started (dashboard {ray.dashboard}, logs {ray.log_dir})")
    wait_dashboard(ray.dashboard)


def teardown(ray: Cluster, run_id: str, ok: bool) -> None:
    left = end_processes(run_id)
    say(f"stopped every process of this rehearsal{'' if not left else f' but {left}'}")
    if ok or not os.environ.get("KEEP_RAY_LOGS"):
        shutil.rmtree(ray.temp_dir, ignore_errors=True)
    else:
        say(f"Ray logs kept in {ray.temp_dir}")


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


def print_timeline(ctx: Context) -> None:
    say("\nTimeline (seconds since start):")
    for line in role_lines(ctx.healthy, ctx.running, ctx.replica_ready, ctx.served, ctx.kv, ctx.t_deploy):
        say(f"  {line}")
    for line in ctx.timeline:
        say(f"  {line}")
    if ctx.first_token is not None:
        say(f"  first token (streamed smoke) {ctx.first_token:.3f} s after sending")
    if ctx.t_smoke is not None:
        say(f"  smoke passed                 {ctx.t_smoke:6.1f} s")
    say(f"  total                        {ctx.clock.now():6.1f} s")
    loads = ctx.clock.loads
    say(f"  load average (1 min) during the run: min {min(loads):.1f}, mean {sum(loads) / len(loads):.1f}, "
        f"max {max(loads):.1f} ({len(loads)} samples)")  # fmt: skip


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
