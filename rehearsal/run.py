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
import tarfile
import uuid
from pathlib import Path

import yaml

from llmclient import smoke
from ray_llm_eks.adapters.ports import free_port
from ray_llm_eks.domain.serving.serve_app import parse_document
from rehearsal import checks, isa_cap, plain_vllm, substitute, topology
from rehearsal import gpu as gpu_rules
from rehearsal.checks import engines
from rehearsal.context import Clock, Context, RehearsalFailed, say
from rehearsal.deploy import deploy, wait_ready
from rehearsal.logs import report_errors
from rehearsal.prepare import CACHE, ROOT, GpuRun, Prepared, prepare, stack_run_dir
from rehearsal.processes import end_processes
from rehearsal.ray_cluster import (
    MULTI_NODE_ENV,
    MULTI_NODE_IP,
    Cluster,
    Node,
    base_environment,
    cluster,
    start_node,
    wait_dashboard,
)


def parser_for(all_checks: list[checks.Check]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rehearse")
    parser.add_argument("--stack", required=True)
    parser.add_argument("--mutate", action="append", default=[], choices=sorted(substitute.MUTATIONS))
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="deploy to ready, at most (s)")
    parser.add_argument("--keep", action="store_true", help="leave it running (stop: make rehearse-stop)")
    parser.add_argument("--port", type=int, default=0, help="HTTP port of the endpoint (default: a free one)")
    parser.add_argument("--target", choices=("cpu", "gpu"), default="cpu", help="engines on the CPU, or on GPUs")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a stack key for this run only, over the stack file's (repeatable)")  # fmt: skip
    parser.add_argument("--spec", type=Path, help="the RayService spec or manifest to rehearse (default: rendered)")
    parser.add_argument("--engine-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for every LLM engine (repeatable)")  # fmt: skip
    parser.add_argument("--engine-arg", action="append", default=[], metavar="ROLE.KEY=VALUE",
                        help="a vLLM engine argument of one role, over the rendered one (repeatable)")  # fmt: skip
    parser.add_argument("--serve-with", choices=("ray", "vllm"), default="ray", help="vllm: the same engines as "
                        "plain `vllm serve` processes behind a minimal proxy (rehearsal/plain_vllm.py)")  # fmt: skip
    parser.add_argument("--save-logs", type=Path, metavar="DIR", help="Ray's logs as a .tar.gz there, at the end")
    parser.add_argument("--keep-ray-logs", action="store_true", help="keep Ray's logs after a run that passes "
                        "too (a failed run always keeps them, and names where)")  # fmt: skip
    gpu = parser.add_argument_group("TARGET=gpu")
    gpu.add_argument("--weights", type=Path, metavar="DIR", help="a local copy of the model (default: its source)")
    gpu.add_argument("--random-weights", action="store_true", help="the real architecture, random weights, built here")
    gpu.add_argument("--model-config", type=Path, help="config.json for --random-weights (default: rehearsal/model_"
                     "configs/<model id>.json)")  # fmt: skip
    gpu.add_argument(
        "--layers",
        type=int,
        help="--random-weights with the model's first N layers only (a mechanism "
        "run that starts in a minute: the layer kinds and widths stay, the figures are not the model's)",
    )
    gpu.add_argument("--eager", action="store_true", help="engines without torch.compile and CUDA graphs (a "
                     "mechanism run whose measure does not depend on them: KV transfers, queues)")  # fmt: skip
    gpu.add_argument("--emulate", metavar="GPU", help="rehearse a smaller GPU (e.g. L4): its budget and defaults")
    gpu.add_argument("--cpu-engines", action="store_true", help="dry run of the GPU layout with CPU engines")
    checks.add_options(parser, all_checks)
    return parser


OBJECT_STORE_BYTES = 2 * 10**9


def gpu_nodes(run: GpuRun) -> list[Node]:
    """The GPU target's Ray nodes on this host (rehearsal.gpu.layout), each with its own GPUs (or sharing them,
    started one after the other) and the custom resources of its role's pool."""
    cpus = max(8, (os.cpu_count() or 8) // len(run.nodes))
    several = len(run.nodes) > 1
    return [
        Node(
            layout.node_name,
            cpus=cpus,
            gpus=0 if run.cpu_engines else layout.gpus,
            # Ray's default takes 30% of RAM per node for its object store; the engines need little of it.
            object_store_bytes=OBJECT_STORE_BYTES,
            resources=layout.resources,
            env={**(MULTI_NODE_ENV if several else {}),
                 **({} if run.cpu_engines else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, layout.devices))})},
            after_role=layout.after_role,
            after_replicas=layout.after_replicas,
            ip=MULTI_NODE_IP if several else "127.0.0.1",
        )
        for layout in run.nodes
    ]  # fmt: skip


def gpu_environment(prepared: Prepared, run_id: str, run_dir: Path) -> dict[str, str]:
    env = cpu_environment(prepared.local, run_id, run_dir) if prepared.gpu.cpu_engines else _logging(
        prepared.local, run_dir, base_environment(run_id))  # fmt: skip
    env.update(gpu_rules.NO_MULTICAST)
    if prepared.gpu.weights_from_hub:
        env.pop("HF_HUB_OFFLINE", None)
        env.pop("TRANSFORMERS_OFFLINE", None)
    return env


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


def cpu_environment(local: substitute.LocalDocument, run_id: str, run_dir: Path) -> dict[str, str]:
    """The CPU engines' environment, with the oneDNN ISA cap this host needs, probed now (printed)."""
    env = base_environment(run_id)
    if local.hybrid:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT / "rehearsal" / "amx_hidden"), env.get("PYTHONPATH")])
        )
    env = _logging(local, run_dir, env)
    choice = isa_cap.cap_for(env)
    say(f"  - process env: {choice.line()}")
    env.pop(isa_cap.ENV, None)
    if choice.cap is not None:
        env[isa_cap.ENV] = choice.cap
    return env


def _logging(local: substitute.LocalDocument, run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    if local.pd:
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
    local = prepared.local
    doc = local.document
    run_id = uuid.uuid4().hex[:12]
    run_dir = stack_run_dir(args.stack)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "serve-config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    try:
        env = cpu_environment(local, run_id, run_dir) if prepared.gpu is None else gpu_environment(
            prepared, run_id, run_dir)  # fmt: skip
    except KeyboardInterrupt:
        say("\ninterrupted while probing this host's oneDNN ISA (no Ray process had started)")
        return 130
    clock.mark("serve config rendered and substituted; " + ("stand-in model" if local.family in substitute.FAMILY_TEXT
               and (prepared.gpu is None or prepared.gpu.cpu_engines) else "weights") + " ready")  # fmt: skip
    if args.serve_with == "vllm":
        return plain_vllm.run(args, prepared, chosen, clock, run_id, run_dir, env)
    if prepared.gpu is None:
        ray = cluster(cpu_nodes(doc, chosen, args, run_id, run_dir), run_id, env)
    else:
        ray = cluster(gpu_nodes(prepared.gpu), run_id, env)
    ctx = Context(
        args=args,
        document=doc,
        url=f"http://127.0.0.1:{doc['http_options']['port']}",
        api_key=prepared.api_key,
        model=local.model_ids[0],
        pd=local.pd,
        dashboard=ray.dashboard,
        metrics_endpoints=lambda: ray.metrics_urls,
        log_dirs=ray.log_dirs,
        run_dir=run_dir,
        run_id=run_id,
        clock=clock,
        app=doc["applications"][0]["name"],
        target=args.target,
        gpu=prepared.gpu,
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
            if (role, 0) in later:
                node = later.pop((role, 0))
                start_node(ray, node, run_id, clock)
                clock.mark(f"Ray node {node.name} started once {role} was healthy")

        def on_replica(role: str, running: int) -> None:
            if (role, running) in later:
                node = later.pop((role, running))
                start_node(ray, node, run_id, clock)
                clock.mark(f"Ray node {node.name} started once {running} {role} replica(s) ran")

        ctx.healthy = wait_ready(
            ctx.dashboard, ctx.app, clock, ctx.log_dirs, args.ready_timeout, ctx.replica_ready, on_healthy, on_replica
        )
        clock.mark(f"application {ctx.app} RUNNING at {ctx.url}")
        deferred = checks.run_all(ctx, chosen)
        print_timeline(ctx)
        if deferred:
            raise RehearsalFailed("; ".join(deferred))
        ok = True
        if args.keep:
            (CACHE / "rehearsal-runs" / "running").write_text(
                f"{run_id} {ctx.url} {' '.join(map(str, ray.temp_dirs))}\n"
            )
            key = f"OPENAI_API_KEY=$(cat {prepared.keys_file}) " if prepared.keys_file else ""
            say(f"\nLeft running at {ctx.url} (Ray metrics {ctx.metrics_url}): {key}make smoke URL={ctx.url}. "
                "Stop: make rehearse-stop")  # fmt: skip
            stopped = True
        return 0
    except RehearsalFailed as exc:
        say(f"\nREHEARSAL FAILED ({kept_logs(ray)}): {str(exc)[:600]}")
        report_errors(ctx.log_dirs)
        if ctx.target == "gpu" and "vllm memory" not in ctx.results:  # an engine refused to start: its lines
            engines.memory_lines(ctx, fail=False)
        return 1
    except smoke.SmokeError as exc:
        say(f"\nREHEARSAL FAILED (smoke; {kept_logs(ray)}): {exc}")
        report_errors(ctx.log_dirs)
        return 1
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    finally:
        if not stopped:
            teardown(ray, run_id, ok, args.save_logs, args.keep_ray_logs)


def start(ray: Cluster, ctx: Context) -> None:
    """The nodes that start before deploy (the others wait for a role: Node.after_role)."""
    for node in ray.nodes:
        if node.after_role is None:
            start_node(ray, node, ctx.run_id, ctx.clock)
    ctx.mark(f"Ray started (dashboard {ray.dashboard}, logs {ray.nodes[0].log_dir})")
    wait_dashboard(ray.dashboard)


def kept_logs(ray: Cluster) -> str:
    return f"Ray's logs kept in {', '.join(map(str, ray.log_dirs))}"


def teardown(ray: Cluster, run_id: str, ok: bool, save_logs: Path | None = None, keep_logs: bool = False) -> None:
    """End every process of the run; Ray's logs are deleted after a run that passed (unless `keep_logs`), kept
    (and named) after any other end: a failure, an interruption, a crash of the rehearsal itself."""
    left = end_processes(run_id)
    if save_logs is not None:
        say(f"Ray's logs saved in {save_ray_logs(ray, save_logs)}")
    say(f"stopped every process of this rehearsal{'' if not left else f' but {left}'}")
    if ok and not keep_logs:
        for temp_dir in ray.temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)
    else:
        say(f"{kept_logs(ray)} (remove: rm -rf {' '.join(map(str, ray.temp_dirs))})")


def save_ray_logs(ray: Cluster, out: Path, largest: int = 40 * 2**20) -> Path:
    """Every node's Ray logs (but files over `largest` bytes) as one .tar.gz in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "ray-logs.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for node in ray.nodes:
            for file in sorted(node.log_dir.rglob("*")) if node.log_dir.exists() else []:
                if file.is_file() and file.stat().st_size <= largest:
                    tar.add(file, arcname=f"{node.name}/{file.relative_to(node.log_dir)}")
    return path


def role_lines(healthy, running, replica_ready, served, kv, t_deploy) -> list[str]:
    """Per role: when its engines were ready, each replica's ready time and requests, KV reads per prefill."""
    engines, reads = kv
    lines = []
    for role, t in sorted(healthy.items(), key=lambda item: item[1]):
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


def max_num_seqs_line(doc: dict) -> str:
    """Each role's max_num_seqs as the deployed document gives its engines. vLLM 0.26 logs the value at INFO
    nowhere: only "Defaulting max_num_seqs to %d for %s usage context." at DEBUG when unset
    (engine/arg_utils.py EngineArgs._set_default_max_num_seqs_and_batched_tokens_args), and the Mamba refusal
    (config/compilation.py) when an engine does not start."""
    seqs = {role: config.engine.max_num_seqs for role, config in parse_document(doc, "rehearsal").roles.items()}
    each = ", ".join(f"{role} {n}" if n is not None else f"{role} unset (vLLM's default)" for role, n in seqs.items())
    return f"max_num_seqs per engine: {each} (from the deployed serve config: vLLM 0.26 logs no line with it)"


def print_timeline(ctx: Context) -> None:
    say("\nTimeline (seconds since start):")
    for line in role_lines(ctx.healthy, ctx.running, ctx.replica_ready, ctx.served, ctx.kv, ctx.t_deploy):
        say(f"  {line}")
    say(f"  {max_num_seqs_line(ctx.document)}")
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
    run_id, _url, *temp_dirs = marker.read_text().split()
    left = end_processes(run_id)
    for temp_dir in temp_dirs:
        shutil.rmtree(temp_dir, ignore_errors=True)
    marker.unlink()
    say(f"stopped rehearsal {run_id}" + (f" ({left} processes survived)" if left else ""))
    return 1 if left else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stop"]:
        sys.exit(stop_kept())
    sys.exit(main())
