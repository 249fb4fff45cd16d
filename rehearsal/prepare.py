"""Phase 1 of a rehearsal: render the stack's document with the project's own code, change only what cannot
exist on this machine (each change printed with its reason), build the stand-in model. Nothing runs yet."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from adapters import stack as stack_adapter
from domain import api_keys, model_fit, serve_config
from domain.ray_service import ray_service_spec
from rehearsal import substitute, topology
from rehearsal.context import say
from rehearsal.logs import ROLE_HEADER

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("RAY_LLM_EKS_CACHE", Path.home() / ".cache" / "ray-llm-eks"))


def deployed_spec(stack: str) -> dict:
    """The RayService spec the program deploys for the stack (domain/ray_service.py, the one builder)."""
    return ray_service_spec(stack_adapter.load_settings(stack_adapter.stack_file(stack)))


def rendered_document(stack: str) -> dict:
    """The serveConfigV2 the stack's RayService gets."""
    return yaml.safe_load(deployed_spec(stack)["serveConfigV2"])


def key_checked(doc: dict) -> bool:
    """The document puts its apps behind the key-checking ingress (domain/api_keys.py)."""
    return any(
        ((app.get("args") or {}).get("ingress_cls_config") or {}).get("ingress_cls") == api_keys.INGRESS_CLS
        for app in doc.get("applications") or []
    )


# What stands here for each ConfigMap and Secret of the key check that the pods mount.
STAND_INS = {
    f"ConfigMap {api_keys.CONFIG_MAP_NAME}": "here the repository's serve_ingress/, the files that ConfigMap carries",
    f"Secret {api_keys.SECRET_NAME}": "here a file with one random key made for this run, readable by this user only",
}


def key_check_here(plan: substitute.Plan, spec: dict, keys_dir: Path) -> tuple[substitute.Plan, list[str]]:
    """The key check with this machine's paths for the pods' two mounts (domain/api_keys.py on_this_machine),
    each move printed with the mount it stands for; a document without the key check is left as it is."""
    if not key_checked(plan.document):
        return plan, []
    here = api_keys.on_this_machine(plan.document, str(ROOT / "serve_ingress"), str(keys_dir / api_keys.KEYS_FILE))
    lines = substitute.moved_paths(plan.document, here, substitute.pod_mounts(spec), STAND_INS)
    return replace(plan, document=here), lines


def new_key(keys_dir: Path) -> str:
    """A random key for this run, in `keys_dir`/keys as the Secret's file (0600: the key is never printed)."""
    key = f"rk-{secrets.token_urlsafe(24)}"
    keys_dir.mkdir(parents=True, exist_ok=True)
    path = keys_dir / api_keys.KEYS_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as keys_file:
        keys_file.write(api_keys.key_file_content(key))
    return key


@dataclass(frozen=True)
class Prepared:
    plan: substitute.Plan
    api_key: str | None  # None: the stack's document checks no key
    keys_file: Path | None


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
    first NUMA node (vLLM 0.26.0 nixl/base_worker.py NixlBaseConnectorWorker.__init__)."""
    return max(physical_cores(sys_node))


def stack_run_dir(stack: str) -> Path:
    return CACHE / "rehearsal-runs" / stack


def prepare(args, checks, port: int) -> Prepared | None:
    """Render, substitute (printed), build the stand-in, make this run's key; then each selected check's own
    changes (printed). None: a kv_role mistake (printed under ROLE_HEADER)."""
    spec = deployed_spec(args.stack)
    rendered = yaml.safe_load(spec["serveConfigV2"])
    configs = serve_config.llm_configs_by_role(rendered, "rehearsal")
    max_len = max(int(c.get("engine_kwargs", {}).get("max_model_len", 4096)) for c in configs.values())
    family = stand_in_family(rendered)
    cores = physical_cores()
    plan = substitute.plan(rendered, str(model_dir(family)), family, port, nixl_core=max(cores), cores=cores)
    keys_dir = stack_run_dir(args.stack) / "api-keys"
    plan, mounted = key_check_here(plan, spec, keys_dir)
    make_model(family, max_len)
    kind = "prefill/decode" if plan.pd else "collocated"
    say(f"Stack {args.stack}: {kind}, model {plan.model_ids[0]}; substitutions:")
    for line in [*plan.substitutions, *mounted]:
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
    if not key_checked(plan.document):
        say("  (the stack's document checks no API key: the smoke sends none)")
        return Prepared(plan, None, None)
    key = new_key(keys_dir)
    say(f"  - API key: a random one for this run, in {keys_dir / api_keys.KEYS_FILE} (the smoke sends it)")
    return Prepared(plan, key, keys_dir / api_keys.KEYS_FILE)
