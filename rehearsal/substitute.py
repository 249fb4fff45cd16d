"""From the serveConfigV2 a stack renders to the one this machine can run: change only what cannot exist
on a CPU, and say what changed. Pure Python (no Ray, no vLLM): `make test` checks it.

Everything not listed here stays as rendered: import path, builder arguments, model_id, roles,
kv_transfer_config (but its backend and buffer device), runtime env, other engine args, replicas.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ray_llm_eks.domain.serving import serve_config
from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import PD_ARG_ROLES, document_dict, parse_document, parse_llm_config

# Stand-in per model family of ray_llm_eks/domain/serving/model_families.py: the same layer kinds as the real model, in
# a class vLLM 0.26 serves as text. Qwen3.5 is registered by vLLM 0.26 only as the multimodal
# Qwen3_5ForConditionalGeneration; Qwen3-Next (Qwen3NextForCausalLM) has the same Gated DeltaNet +
# gated full-attention layers, text only.
STAND_INS = {"qwen3_5": "qwen3_next", "qwen3": "qwen3", "llama3": "llama"}
HYBRID_FAMILIES = {"qwen3_next"}  # linear-attention (Gated DeltaNet) layers beside full attention
# Which real model classes each stand-in speaks for (printed).
FAMILY_TEXT = {
    "qwen3_next": "Qwen3NextForCausalLM, 4 layers: 3 Gated DeltaNet + 1 gated full attention",
    "qwen3": "Qwen3ForCausalLM, 2 layers of full attention",
    "llama": "LlamaForCausalLM, 2 layers of full attention",
}
# Share of RAM each engine reserves: vLLM's CPU worker reads gpu_memory_utilization as a share of the
# memory of its NUMA node (16 GiB seen here) and counts weights and the profiling run's activations
# (~1 GiB at 2048 batched tokens) in it: 0.03 left "-0.52 GiB" for KV; 0.1 leaves ~0.6 GiB.
CPU_MEMORY_FRACTION = 0.1
# On a CPU, vLLM 0.26's NixlConnector pins the worker's main thread (OpenMP's first thread) to the last
# physical core (nixl/base_worker.py, "reserve different cores for start_load_kv()"), and auto binding
# keeps that core for OpenMP too when the machine has no more cores than vLLM reserves (2 for P/D,
# utils/ompmultiprocessing.py): two spinning OpenMP threads then share one core. One thread, bound there.
OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"
# kv_role each side of a PD app may have (why: ray_llm_eks/domain/serving/serve_config.py, PD_KV_ROLES).
ROLES = {role: set(allowed) for role, allowed in serve_config.PD_KV_ROLES.items()}
# Tensor parallelism on the CPU (vLLM 0.26): Ray Serve LLM runs a CPU engine with vLLM's multiprocessing executor
# (Ray 2.58.0 ray/llm/_internal/serve/engines/vllm/vllm_models.py VLLMEngineConfig.get_initialization_kwargs),
# one Worker process per rank, joined by vLLM's CPU communicator (device_communicators/cpu_communicator.py,
# shared memory). Auto OpenMP binding wants one NUMA node per rank (vLLM 0.26.0 vllm/utils/ompmultiprocessing.py
# OMPProcessManager._get_autobind_cpu_ids, an assert): with one node, ranks are bound by hand, one physical core
# each, so no core runs two ranks' threads (two busy threads on one core stall a forward pass).
MIN_TP = 2


class CannotRehearse(ValueError):
    """The topology needs what this machine lacks (one line: what, and why)."""


T = TypeVar("T")


def edit_roles(doc: dict, where: str, edit: Callable[[str, dict], T]) -> dict[str, T]:
    """Edit each role's LLM config of `doc` (plain data, changed in place) as plain data: `edit(role, config)` gets
    the role's config of the parsed document as a dict of its own and changes it; each edited config is parsed back
    into its role, so a rehearsal deploys only what the stack's parse accepts. What each `edit` returned, by role."""
    returned: dict[str, T] = {}

    def edited(role, config):
        plain = to_dict(config)
        returned[role] = edit(role, plain)
        return parse_llm_config(plain, where, role)

    new = document_dict(parse_document(doc, where).map_roles(edited))
    doc.clear()
    doc.update(new)
    return returned


MUTATIONS = {
    "swap-roles": "prefill kv_role <-> decode kv_role",
    "connector-typo": "kv_connector NixlConnector -> NixlConector on both sides",
    # Above the 256 that vLLM raises a hybrid model's attention block to (page size >= mamba page size).
    "block-size-mismatch": "block_size 256 on prefill, 512 on decode",
}
MUTATED_BLOCK_SIZES = {"prefill": 256, "decode": 512}  # block-size-mismatch's, by side


@dataclass(frozen=True)
class LocalDocument:
    """The stack's serve document as this machine runs it, each substitution made and printed, and what the
    run needs to know of it."""

    document: dict  # the serve config to deploy here
    substitutions: list[str]  # one line per change, for the terminal
    family: str
    hybrid: bool
    model_ids: list[str]
    pd: bool


def loopback(doc: dict, port: int) -> list[str]:
    """The HTTP proxy on 127.0.0.1 and the given port (a free one here): the printed lines."""
    subs = []
    http = doc.setdefault("http_options", {})
    if http.get("host") != "127.0.0.1":
        subs.append(f"http_options.host: {http.get('host')!r} -> '127.0.0.1' (loopback only)")
        http["host"] = "127.0.0.1"
    if http.get("port") != port:
        subs.append(f"http_options.port: {http.get('port')!r} -> {port} (a free port here)")
        http["port"] = port
    return subs


def stand_in(family: str | None, hybrid: bool) -> str:
    """The stand-in for a model family; for a model of the user's (no family), by its layer kinds."""
    if family in STAND_INS:
        return STAND_INS[family]
    return "qwen3_next" if hybrid else "llama"


def for_cpu(
    rendered: dict,
    model_path: str,
    family: str,
    port: int = 8000,
    nixl_core: int = 0,
    cores: tuple[int, ...] = (0, 1),
    keep_pools: bool = False,
) -> LocalDocument:
    """`family`: the stand-in's (stand_in()); `model_path`: where it was made; `nixl_core`: the core vLLM's
    NixlConnector pins each CPU engine's main thread to (rehearsal.run.nixl_pinned_core); `cores`: this
    machine's physical cores (rehearsal.run.physical_cores); `keep_pools`: the bundles keep their pool resources (the
    GPU target's layout of Ray nodes, rehearsed with CPU engines)."""
    doc = copy.deepcopy(rendered)
    subs = loopback(doc, port)

    hybrid = family in HYBRID_FAMILIES

    def on_cpu(role: str, config: dict) -> str:
        """The role's config as a CPU runs it; the model id it serves."""
        where = f"{role}"
        loading = config["model_loading_config"]
        subs.append(
            f"{where}.model_loading_config.model_source: {loading.get('model_source')!r} -> {model_path!r} "
            f"(tiny random {FAMILY_TEXT[family]}; model_id stays {loading['model_id']!r})"
        )
        loading["model_source"] = model_path

        if "accelerator_type" in config:
            # Ray 2.58 refuses it on a CPU-only config (LLMConfig._check_accelerator_type_matches_hardware).
            subs.append(f"{where}.accelerator_type: {config.pop('accelerator_type')!r} -> removed (no GPU here)")
        pg = config.get("placement_group_config")
        if pg:
            old = pg.get("bundle_per_worker") or pg.get("bundles")
            key = "bundle_per_worker" if "bundle_per_worker" in pg else "bundles"
            new = (
                _cpu_bundle(old, keep_pools)
                if key == "bundle_per_worker"
                else [_cpu_bundle(b, keep_pools) for b in old]
            )
            kept = "pool resources kept" if keep_pools else "no pool resources"
            subs.append(f"{where}.placement_group_config.{key}: {old} -> {new} (CPU bundles, {kept})")
            pg[key] = new

        engine = config.setdefault("engine_kwargs", {})
        old = engine.get("gpu_memory_utilization")
        engine["gpu_memory_utilization"] = CPU_MEMORY_FRACTION
        subs.append(
            f"{where}.engine_kwargs.gpu_memory_utilization: {old!r} -> {CPU_MEMORY_FRACTION} "
            "(on the CPU a share of RAM)"
        )
        if engine.get("enforce_eager") is not True:
            subs.append(f"{where}.engine_kwargs.enforce_eager: {engine.get('enforce_eager')!r} -> True (no graphs)")
            engine["enforce_eager"] = True
        if hybrid and engine.get("mamba_ssm_cache_dtype") != "float32":
            subs.append(
                f"{where}.engine_kwargs.mamba_ssm_cache_dtype: {engine.get('mamba_ssm_cache_dtype')!r} -> 'float32' "
                "(vLLM's CPU Gated DeltaNet kernel: 'Input tensor dtype mismatch' otherwise)"
            )
            engine["mamba_ssm_cache_dtype"] = "float32"

        subs.extend(_tensor_parallel_here(where, config, cores))

        kv = engine.get("kv_transfer_config")
        if kv is not None and int(engine.get("tensor_parallel_size", 1)) > 1:
            raise CannotRehearse(
                f"{where}: prefill/decode with tensor_parallel_size > 1 on the CPU: vLLM's NixlConnector pins every "
                "rank's main thread to the same last core (vLLM 0.26.0 vllm/distributed/kv_transfer/kv_connector/"
                "v1/nixl/base_worker.py NixlBaseConnectorWorker.__init__)"
            )
        if kv is not None:
            extra = kv.setdefault("kv_connector_extra_config", {})
            backends = extra.get("backends")
            if backends != ["UCX"]:
                # NIXL's LIBFABRIC plugin needs the CUDA driver library (libcuda.so), absent here.
                subs.append(f"{where}.kv_transfer_config.kv_connector_extra_config.backends: {backends} -> ['UCX']")
                extra["backends"] = ["UCX"]
            if kv.get("kv_buffer_device") != "cpu":
                # On the CPU platform the KV cache is host memory already: no separate buffer.
                subs.append(f"{where}.kv_transfer_config.kv_buffer_device: {kv.get('kv_buffer_device')!r} -> 'cpu'")
                kv["kv_buffer_device"] = "cpu"
            env = config.setdefault("runtime_env", {}).setdefault("env_vars", {})
            old = env.get(OMP_BIND)
            env[OMP_BIND] = str(nixl_core)
            subs.append(
                f"{where}.runtime_env.env_vars.{OMP_BIND}: {old!r} -> '{nixl_core}' (one OpenMP thread, on the core "
                "vLLM's NixlConnector pins the engine's main thread to; two on one core: a forward pass took ~60 s)"
            )
        return loading["model_id"]

    model_ids = edit_roles(doc, "rehearsal", on_cpu)
    return LocalDocument(doc, subs, family, hybrid, list(model_ids.values()), pd="prefill" in model_ids)


def pod_mounts(spec: dict) -> dict[str, str]:
    """mount path -> "<kind> <name>" of the ConfigMaps and Secrets the head's Ray container mounts (RayService
    spec): what a document's paths may point into."""
    pod = spec["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    sources = {}
    for volume in pod.get("volumes") or []:
        for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
            if key in volume:
                sources[volume["name"]] = f"{kind} {volume[key].get('name') or volume[key].get('secretName')}"
    return {m["mountPath"]: sources[m["name"]] for m in pod["containers"][0].get("volumeMounts") or []
            if m["name"] in sources}  # fmt: skip


def moved_paths(before: dict, after: dict, mounts: dict[str, str], why: dict[str, str]) -> list[str]:
    """One line per env var of an application or of one of its LLM configs whose path moved from a pod mount to
    this machine, naming the mount (`mounts`: pod_mounts) and what stands for it here (`why`: mount source ->
    reason)."""
    lines = []
    for old_app, new_app in zip(before.get("applications") or [], after.get("applications") or [], strict=True):
        old_holders = _env_holders(old_app)
        for part, holder in _env_holders(new_app).items():
            old_env = (old_holders.get(part, {}).get("runtime_env") or {}).get("env_vars") or {}
            for key, new in ((holder.get("runtime_env") or {}).get("env_vars") or {}).items():
                if (old := old_env.get(key)) == new:
                    continue
                path = next(
                    (p for p in mounts if isinstance(old, str) and re.match(rf"{re.escape(p)}(/|:|$)", old)), None
                )
                reason = f"{path} is the {mounts[path]} mount: {why.get(mounts[path], '?')}" if path else "no pod mount"
                where = f"applications[{new_app.get('name')}]{part}.runtime_env.env_vars.{key}"
                lines.append(f"{where}: {old!r} -> {new!r} ({reason})")
    return lines


def _env_holders(app: dict) -> dict[str, dict]:
    """What carries runtime_env env_vars in an application: itself and each of its LLM configs (Ray Serve LLM
    gives an engine replica its config's env_vars in place of the app's), keyed by their path in the app."""
    args = app.get("args") or {}
    holders = {"": app} | {f".args.{key}": args[key] for key in PD_ARG_ROLES if key in args}
    return holders | {f".args.llm_configs[{i}]": config for i, config in enumerate(args.get("llm_configs") or [])}


def _cpu_bundle(bundle: dict, keep_pools: bool) -> dict:
    """A GPU bundle as a CPU one: one CPU instead of the GPU, with the pool's own resources or without."""
    return {"CPU": 1, **({k: v for k, v in bundle.items() if k not in {"GPU", "CPU"}} if keep_pools else {})}


def _tensor_parallel_here(where: str, config: dict, cores: tuple[int, ...]) -> list[str]:
    """TP degree at most the physical cores, each rank bound to its own core; refused below MIN_TP cores."""
    engine = config["engine_kwargs"]
    tp = int(engine.get("tensor_parallel_size", 1))
    if tp < 2:
        return []
    if len(cores) < MIN_TP:
        raise CannotRehearse(
            f"{where}.engine_kwargs.tensor_parallel_size = {tp}: this machine has {len(cores)} physical core(s); "
            f"tensor parallelism on the CPU needs one per rank, at least {MIN_TP} (vLLM's auto OpenMP binding "
            "asserts one NUMA node per rank: vLLM 0.26.0 vllm/utils/ompmultiprocessing.py "
            "OMPProcessManager._get_autobind_cpu_ids)"
        )
    subs = []
    here = min(tp, len(cores))
    if here != tp:
        subs.append(
            f"{where}.engine_kwargs.tensor_parallel_size: {tp} -> {here} (one rank per physical core, {len(cores)} "
            "here; the ranks still shard every layer and all-reduce through vLLM's CPU communicator)"
        )
        engine["tensor_parallel_size"] = here
    env = config.setdefault("runtime_env", {}).setdefault("env_vars", {})
    bind = "|".join(str(c) for c in cores[:here])
    subs.append(
        f"{where}.runtime_env.env_vars.{OMP_BIND}: {env.get(OMP_BIND)!r} -> {bind!r} (one OpenMP thread per rank, "
        "each on its own core; auto binding needs one NUMA node per rank, this machine has one)"
    )
    env[OMP_BIND] = bind
    return subs


def role_mistakes(doc: dict) -> list[str]:
    """kv_role on the wrong side of a PD app, one line each. No engine reports it: vLLM 0.26's NixlConnector
    serves either way; kv_role only makes a consumer defer freeing blocks a load may race with under async
    scheduling (vLLM 0.26.0 v1/core/sched/scheduler.py Scheduler.__init__, defer_block_free), vLLM's default on
    GPUs and off on the CPU."""
    configs = parse_document(doc, "rehearsal").roles
    if "prefill" not in configs:
        return []
    lines = []
    for role, allowed in ROLES.items():
        kv = configs[role].engine.kv_transfer_config
        kv_role = None if kv is None else kv.kv_role
        if kv_role not in allowed:
            lines.append(
                f"{role}.engine_kwargs.kv_transfer_config.kv_role = {kv_role!r}: the {role} side must "
                f"be {' or '.join(sorted(allowed))} (no engine reports this; on GPUs the decode side would lose "
                "its deferred block frees under async scheduling)"
            )
    return lines


def scale_demo(doc: dict, role: str, target: float = 1) -> str:
    """Lower `role`'s target_ongoing_requests so a few held streams make Serve scale that role up (the
    --scale-demo substitution). Returns the printed line; ValueError where the role cannot scale up."""

    def lower(name: str, config: dict) -> str | None:
        if name != role:
            return None
        deployment = config.get("deployment_config") or {}
        scaling = deployment.get("autoscaling_config")
        if not scaling or int(scaling.get("max_replicas", 1)) <= int(scaling.get("min_replicas", 1)):
            raise ValueError(f"--scale-demo {role}: {role} has no autoscaling range (min_replicas < max_replicas)")
        old = scaling.get("target_ongoing_requests")
        scaling["target_ongoing_requests"] = target
        return (
            f"{role}.deployment_config.autoscaling_config.target_ongoing_requests: {old!r} -> {target!r} "
            "(--scale-demo: a few held streams exceed it)"
        )

    lines = edit_roles(doc, "rehearsal", lower)
    if role not in lines:
        raise ValueError(f"--scale-demo {role}: no such role here; roles: {', '.join(lines)}")
    return lines[role]


def mutate(doc: dict, mutation: str) -> str:
    """Inject a mistake that only an engine catches (tests of the failure path). Returns what changed."""
    configs = parse_document(doc, "rehearsal").roles
    if "prefill" not in configs:
        raise ValueError(f"--mutate {mutation}: needs a prefill/decode app")
    if mutation not in MUTATIONS:
        raise ValueError(f"unknown mutation {mutation!r}: one of {sorted(MUTATIONS)}")
    other_side = {"prefill": "decode", "decode": "prefill"}

    def inject(role: str, config: dict) -> None:
        engine = config["engine_kwargs"]
        if mutation == "swap-roles":
            engine["kv_transfer_config"]["kv_role"] = configs[other_side[role]].engine.kv_transfer_config.kv_role
        elif mutation == "connector-typo":
            engine["kv_transfer_config"]["kv_connector"] = "NixlConector"
        else:
            engine["block_size"] = MUTATED_BLOCK_SIZES[role]

    edit_roles(doc, "rehearsal", inject)
    return f"MUTATION {mutation}: {MUTATIONS[mutation]}"
