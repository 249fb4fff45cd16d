"""Phase 1 of a rehearsal: render the stack's document with the project's own code, change only what cannot
exist on this machine (each change printed with its reason), build the stand-in model. Nothing runs yet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from adapters import stack as stack_adapter
from domain import model_fit, serve_config
from rehearsal import substitute, topology
from rehearsal.context import say
from rehearsal.logs import ROLE_HEADER

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("RAY_LLM_EKS_CACHE", Path.home() / ".cache" / "ray-llm-eks"))


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
    first NUMA node (vLLM 0.26 nixl/base_worker.py, NixlConnectorWorker.__init__)."""
    return max(physical_cores(sys_node))


def prepare(args, checks, port: int) -> substitute.Plan | None:
    """Render, substitute (printed), build the stand-in; then each selected check's own changes (printed).
    None: a kv_role mistake (printed under ROLE_HEADER)."""
    rendered = rendered_document(args.stack)
    configs = serve_config.llm_configs_by_role(rendered, "rehearsal")
    max_len = max(int(c.get("engine_kwargs", {}).get("max_model_len", 4096)) for c in configs.values())
    family = stand_in_family(rendered)
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
    for check in checks:
        if check.prepare is not None:
            try:
                lines = check.prepare(plan, args)
            except ValueError as exc:
                raise substitute.CannotRehearse(str(exc)) from None
            for line in lines:
                say(f"  - {line}")
    if wrong_roles := substitute.role_mistakes(plan.document):
        say(f"\nREHEARSAL FAILED: kv_role on the wrong side\n{ROLE_HEADER}")
        for line in wrong_roles:
            say(f"  {line}")
        return None
    return plan
