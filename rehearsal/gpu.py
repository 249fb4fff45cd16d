"""The GPU target (`make rehearse STACK=<stack> TARGET=gpu`): the rendered document on a machine with NVIDIA
GPUs, with fewer substitutions than on the CPU (kv_buffer_device, compile and CUDA graphs stay as rendered),
each printed with its reason; and the Ray nodes that lay the roles out on this machine's GPUs. Pure Python:
what the machine has comes in as a GpuHere (rehearsal.gpu_probe reads it)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.serving import vllm_fit
from ray_llm_eks.domain.serving.role_view import replica_bounds
from ray_llm_eks.domain.serving.serve_app import parse_document, parse_llm_config
from ray_llm_eks.domain.serving.serve_config import with_kv_transfer_env
from rehearsal.substitute import CannotRehearse, LocalDocument, edit_roles, loopback

GIB_MIB = 1024
# NCCL, PyTorch and NVSHMEM without NVLink multicast: the GPU machines this is rehearsed on ask for it (a
# program using multicast can take a shared host's GPUs out of service); harmless everywhere else.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass(frozen=True)
class GpuHere:
    """This machine's GPUs, as CUDA sees them (vLLM's budget is a share of `total_mib`)."""

    count: int
    name: str  # e.g. "NVIDIA H200"
    total_mib: int  # cudaMemGetInfo's total of GPU 0
    efa: bool  # an EFA device is present (NIXL's LIBFABRIC backend can run)
    flashinfer: bool  # the flashinfer package is installed


@dataclass(frozen=True)
class Emulation:
    """A smaller GPU rehearsed on this one: vLLM's budget and memory-dependent defaults become its own."""

    gpu: str  # e.g. "L4"
    memory_mib: (
        int  # per GPU, as the fit check assumes it (ray_llm_eks/domain/platform/aws_facts.py, from EC2's GpuInfo)
    )
    instance_type: str  # one with that GPU: what the fit check predicts for (its per-GPU figures)


def emulation(gpu: str) -> Emulation:
    """`--emulate L4`: the GPU model's memory from ray_llm_eks/domain/platform/aws_facts.py's instance table."""
    known: dict[str, tuple[int, str]] = {}
    for name, spec in aws_facts.INSTANCE_SPECS.items():
        if spec.gpu_model:
            known.setdefault(spec.gpu_model, (spec.gpu_memory_mib, name))
    if gpu not in known:
        raise CannotRehearse(
            f"--emulate {gpu}: not a GPU of ray_llm_eks/domain/platform/aws_facts.py's table; one of {sorted(known)}"
        )
    return Emulation(gpu, *known[gpu])


def server_defaults(memory_mib: int, name: str) -> dict[str, int]:
    """What vLLM sets an unset max_num_seqs and max_num_batched_tokens to on this GPU under Ray Serve LLM
    (ray_llm_eks/domain/serving/vllm_fit.py: on a GPU of 70 GiB or more 1024 and 8192, on an L4 256 and 2048). A big GPU
    rehearsing a small one must render the small one's, or it runs a different engine."""
    return {
        "max_num_seqs": vllm_fit.default_max_num_seqs(memory_mib, name),
        "max_num_batched_tokens": vllm_fit.default_max_num_batched_tokens(memory_mib, name),
    }


@dataclass(frozen=True)
class RoleNeed:
    role: str
    gpus: int  # replicas x tensor parallel x pipeline parallel
    resources: dict[str, float]  # the custom resources its bundles ask for (the pool's), per GPU
    accelerator: str | None  # accelerator_type the config asks for
    replicas: int = 1  # as the deployment starts

    @property
    def gpus_per_replica(self) -> int:
        return self.gpus // self.replicas


def role_needs(doc: dict) -> list[RoleNeed]:
    """What each LLM role needs of a Ray node, from its config as deployed (roles in the document's order)."""
    needs = []
    for role, config in parse_document(doc, "rehearsal").roles.items():
        bounds = replica_bounds(role, config)
        placement = config.placement_group_config
        bundle = (placement.bundle_per_worker if placement is not None else None) or {}
        custom = {k: float(v) for k, v in bundle.items() if k not in {"GPU", "CPU", "memory"}}
        gpus = bounds.initial * bounds.gpus_per_replica
        needs.append(RoleNeed(role, gpus, custom, config.accelerator_type, bounds.initial))
    return needs


@dataclass(frozen=True)
class NodeLayout:
    role: str
    gpus: int
    devices: tuple[int, ...]  # CUDA_VISIBLE_DEVICES of the node
    resources: dict[str, float]
    after_role: str | None  # started once that role is healthy (None: before deploy)
    # Started once `after_role` has this many replicas RUNNING instead (0: once it is HEALTHY): the next replica
    # of one role on a GPU its first replica already uses.
    after_replicas: int = 0
    name: str = ""  # the Ray node's (default: the role's)

    @property
    def node_name(self) -> str:
        return self.name or self.role


def layout(needs: list[RoleNeed], gpu_count: int) -> tuple[list[NodeLayout], str]:
    """One Ray node per role on this host. Enough GPUs: each role its own (CUDA_VISIBLE_DEVICES); fewer: the
    roles share the same GPUs and start one after the other (vLLM profiles the free memory of the whole device,
    so an engine starting beside another's profiling run would count the other's memory as its own), and a role
    whose replicas do not fit the GPUs together gets one Ray node per replica, each started once the replica
    before it runs."""
    total = sum(n.gpus for n in needs)
    if total <= gpu_count:
        nodes, first = [], 0
        for need in needs:
            devices = tuple(range(first, first + need.gpus))
            first += need.gpus
            nodes.append(NodeLayout(need.role, need.gpus, devices, _resources(need, need.gpus), None))
        return nodes, f"{len(needs)} Ray node(s), one per role, each on its own GPU(s) ({total} of {gpu_count})"
    if biggest := [n for n in needs if n.gpus_per_replica > gpu_count]:
        raise CannotRehearse(
            f"{biggest[0].role} needs {biggest[0].gpus_per_replica} GPUs per replica (tensor x pipeline parallel); "
            f"this machine has {gpu_count}"
        )
    nodes, previous = [], None
    for need in needs:
        if need.gpus <= gpu_count:
            nodes.append(NodeLayout(need.role, need.gpus, tuple(range(need.gpus)), _resources(need, need.gpus),
                                    previous))  # fmt: skip
        else:
            per = need.gpus_per_replica
            for k in range(need.replicas):
                after, running = (previous, 0) if k == 0 else (need.role, k)
                nodes.append(NodeLayout(need.role, per, tuple(range(per)), _resources(need, per), after, running,
                                        f"{need.role}-{k + 1}"))  # fmt: skip
        previous = need.role
    order = " -> ".join(n.node_name for n in nodes)
    return nodes, (
        f"{len(nodes)} Ray nodes on this host sharing GPU(s) {','.join(map(str, range(max(n.gpus for n in nodes))))}"
        f", started one after the other ({order}: each once the one before is healthy, or its replica running)"
    )


def _resources(need: RoleNeed, gpus: int) -> dict[str, float]:
    resources = {k: v * gpus for k, v in need.resources.items()}
    if need.accelerator:
        resources[f"accelerator_type:{need.accelerator}"] = 1.0
    return resources


def for_gpus(
    rendered: dict,
    here: GpuHere,
    *,
    family: str,
    hybrid: bool,
    port: int,
    weights: str | None = None,
    weights_why: str = "",
    emulate: Emulation | None = None,
    nodes_on_one_host: int = 1,
    eager: bool = False,
) -> LocalDocument:
    """The document as this GPU machine runs it; every change printed with its reason."""
    doc = copy.deepcopy(rendered)
    subs = loopback(doc, port)
    if nodes_on_one_host > 1 and doc.get("proxy_location") != "HeadOnly":
        subs.append(
            f"proxy_location: {doc.get('proxy_location')!r} -> 'HeadOnly' ({nodes_on_one_host} Ray nodes on one host: "
            "a proxy per node would bind the same HTTP port twice)"
        )
        doc["proxy_location"] = "HeadOnly"

    def on_this_gpu(role: str, config: dict) -> str:
        """The role's config as this machine runs it; the model id it serves."""
        loading = config["model_loading_config"]
        if weights is not None:
            subs.append(
                f"{role}.model_loading_config.model_source: {loading.get('model_source')!r} -> {weights!r} "
                f"({weights_why}; model_id stays {loading['model_id']!r})"
            )
            loading["model_source"] = weights
        engine = config.setdefault("engine_kwargs", {})
        if emulate is not None:
            subs.extend(_emulate(role, engine, here, emulate))
        if eager and engine.get("enforce_eager") is not True:
            subs.append(
                f"{role}.engine_kwargs.enforce_eager: {engine.get('enforce_eager')!r} -> True (--eager: no "
                "torch.compile, no CUDA graphs; an engine starts minutes sooner, decode steps are slower)"
            )
            engine["enforce_eager"] = True
        if hybrid and not here.flashinfer and "gdn_prefill_backend" not in engine:
            subs.append(
                f"{role}.engine_kwargs.gdn_prefill_backend: None -> 'triton' (FlashInfer is not installed here; "
                "vLLM 0.26 picks FlashInfer's kernel only on SM 9.0/10.x and Triton's on an L4, SM 8.9: "
                "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend)"
            )
            engine["gdn_prefill_backend"] = "triton"
        if not here.flashinfer:
            env = config.setdefault("runtime_env", {}).setdefault("env_vars", {})
            if (old := env.get("VLLM_USE_FLASHINFER_SAMPLER")) != "0":
                subs.append(
                    f"{role}.runtime_env.env_vars.VLLM_USE_FLASHINFER_SAMPLER: {old!r} -> '0' (FlashInfer is not "
                    "installed here: PyTorch's top-k/top-p sampler instead)"
                )
                env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
        kv = engine.get("kv_transfer_config")
        if kv is not None and not here.efa:
            extra = kv.setdefault("kv_connector_extra_config", {})
            if extra.get("backends") not in (None, ["UCX"]):
                subs.append(
                    f"{role}.kv_transfer_config.kv_connector_extra_config.backends: {extra.get('backends')} -> ['UCX'] "
                    "(no EFA device here; kv_buffer_device stays "
                    f"{kv.get('kv_buffer_device')!r})"
                )
                extra["backends"] = ["UCX"]
            # The stack's own environment for a role on UCX (the rendered one is on LIBFABRIC, which has none).
            stacks = with_kv_transfer_env(parse_llm_config(config, "rehearsal", role))
            own = (config.get("runtime_env") or {}).get("env_vars") or {}
            added = {k: v for k, v in ((stacks.runtime_env or {}).get("env_vars") or {}).items() if k not in own}
            if added:
                config.setdefault("runtime_env", {})["env_vars"] = {**own, **added}
            why = "NIXL on UCX here: the stack's setting for it, ray_llm_eks/domain/serving/serve_config.py"
            subs.extend(
                f"{role}.runtime_env.env_vars.{k}: None -> {v!r} ({why} KV_TRANSFER_ENV)" for k, v in added.items()
            )
        return loading["model_id"]

    model_ids = edit_roles(doc, "rehearsal", on_this_gpu)
    return LocalDocument(doc, subs, family, hybrid, list(model_ids.values()), pd="prefill" in model_ids)


def _emulate(role: str, engine: dict, here: GpuHere, emulate: Emulation) -> list[str]:
    subs = []
    util = float(engine.get("gpu_memory_utilization", 0.92))
    scaled = round(util * emulate.memory_mib / here.total_mib, 8)
    budget = util * emulate.memory_mib / GIB_MIB
    subs.append(
        f"{role}.engine_kwargs.gpu_memory_utilization: {util} -> {scaled} (so that vLLM's budget, {scaled} x "
        f"{here.total_mib} MiB of this {here.name}, is the {emulate.gpu}'s {util} x {emulate.memory_mib} MiB = "
        f"{budget:.2f} GiB)"
    )
    engine["gpu_memory_utilization"] = scaled
    theirs, ours = server_defaults(emulate.memory_mib, emulate.gpu), server_defaults(here.total_mib, here.name)
    for key, value in theirs.items():
        if key not in engine:
            subs.append(
                f"{role}.engine_kwargs.{key}: None -> {value} (what vLLM 0.26 defaults to on the {emulate.gpu}; "
                f"unset, this {here.name} would run {ours[key]}: vLLM 0.26 engine/arg_utils.py get_batch_defaults)"
            )
            engine[key] = value
    return subs
