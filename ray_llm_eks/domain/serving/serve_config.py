"""The serving application: a Ray Serve config file from ray_llm_eks/serve_configs/, with the stack's overrides,
pinned to the GPU pools, rendered into the RayService's `serveConfigV2`.

Ray validates these files only when the cluster starts them, and passes `engine_kwargs` to vLLM
unchecked, so this module repeats the rules that would otherwise fail on a GPU node 25 minutes in:
the PD rules of Ray's PDServingArgs (which cannot be imported without vLLM), and vLLM's engine
argument names for the image's vLLM version. The tests also run Ray's own schemas on the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ray_llm_eks.domain.core import packaged
from ray_llm_eks.domain.core.errors import NOT_SHOWN, UNSET, ConfigError, did_you_mean, in_serve_config, yaml_text
from ray_llm_eks.domain.core.facts import COLLOCATED_ROLE, NIXL_DEFAULT_BACKEND, PD_ROLES, POOL_RESOURCE_PREFIX
from ray_llm_eks.domain.serving import engine_args
from ray_llm_eks.domain.serving.fields import drop, ensure, put, to_dict
from ray_llm_eks.domain.serving.llm_config import AutoscalingConfig, KvTransferConfig, LlmConfig, PlacementGroupConfig
from ray_llm_eks.domain.serving.model_families import FAMILY_ENGINE_KEYS, FAMILY_ENV_KEYS, ModelFamily
from ray_llm_eks.domain.serving.serve_app import (
    GUARDED_PD_IMPORT,
    LOCAL_PREFILL_BELOW,
    PD_IMPORT,
    SELECTIVE_PD_IMPORT,
    ServeDocument,
    parse_document,
)

SERVE_CONFIG_DIR = packaged.ROOT / "serve_configs"


# Ray Serve LLM's deployment names carry the role (Prefill:<model>, Decode:<model>); the ingress (or a proxy or
# router) runs no engine; anything else that serves is one collocated engine. A regex Python and PromQL (RE2)
# read alike: the alerts and dashboards match Serve's `deployment` label with it.
NOT_ENGINES = "(?i).*(ingress|proxy|router).*"


def role_of(deployment: str) -> str | None:
    """The role of a Serve deployment's engines, read from its name; None for one that runs no engine."""
    if re.fullmatch(NOT_ENGINES, deployment):
        return None
    low = deployment.lower()
    # The last PD role the name holds, as the alerts' label_replace chain reads it (alerts.with_role).
    return next((role for role in reversed(PD_ROLES) if role in low), COLLOCATED_ROLE)


def role_resource(role: str) -> str:
    """The Ray custom resource a worker group of this role advertises and its LLM deployment asks for."""
    return f"{POOL_RESOURCE_PREFIX}{role}"


def serve_config_names() -> list[str]:
    return packaged.names(SERVE_CONFIG_DIR, ".yaml")


@dataclass(frozen=True)
class OwnServeFile:
    """A serve config of the user's own (serveConfig: a path beside the stack file), as the adapter read it."""

    name: str  # the path as serveConfig gives it, relative to the stack file's folder
    document: Any


def is_own_file(name: str) -> bool:
    """Whether serveConfig names a file of the user's (a path) rather than a shipped one (a stem)."""
    return "/" in name or "\\" in name or name.endswith((".yaml", ".yml"))


SERVE_CONFIG_ALLOWED = (
    "a serve config of ray_llm_eks/serve_configs/ by name, or a Ray Serve config file of your own beside the stack "
    "file, by its path relative to that folder (serveConfig: my-serve.yaml)"
)


def where_of(name: str) -> str:
    """How a line names the serve file of serveConfig `name`."""
    return name if is_own_file(name) else f"ray_llm_eks/serve_configs/{name}.yaml"


@dataclass(frozen=True)
class ServeOverrides:
    """What a stack may change in the serve file without editing it."""

    model_id: str | None = None
    model_source: str | None = None
    max_model_len: int | None = None
    replicas: Mapping[str, int] | None = None
    # Ray Serve autoscaling_config per role (ray_llm_eks/domain/fit/scaling.py)
    autoscaling: Mapping[str, dict] | None = None
    kv_buffer_device: str = "cuda"  # kvBufferDevice: where NIXL's KV transfer buffers live
    local_prefill_below: int | None = None  # selectivePd: shorter prompts are prefilled by decode (None: off)


KV_BUFFER_DEVICES = ("cuda", "cpu")
# Why a hybrid model cannot stage its KV cache in host memory (vLLM 0.26.0, NIXL connector):
# initialize_host_xfer_buffer and kv_connector/utils.py copy_kv_blocks read `.shape` of each layer's
# cache, and a linear-attention layer hands over a list [conv, ssm]: AttributeError at registration.
HYBRID_CPU_BUFFER = (
    "cuda for a hybrid (linear-attention) model: vLLM 0.26's NIXL host-buffer path "
    "(initialize_host_xfer_buffer, copy_kv_blocks) expects one tensor per layer and fails on the "
    "[conv, ssm] state of linear-attention layers, killing both engines"
)


class ModelFacts(Protocol):
    """What the renderer asks of the model table for the model a config serves (model_table.ModelSpec)."""

    family: ModelFamily | None  # None for a modelSpec of the user's
    hybrid: bool


@dataclass(frozen=True)
class PoolShape:
    """What the renderer needs to know about the GPU pool a role runs on."""

    instance_type: str
    gpu_model: str | None  # None: the role's pools have different GPUs (no accelerator_type then)
    gpus_per_node: int
    nodes: int  # nodes that run (desiredSize): what a role of fixed replicas may use


def load_serve_file(name: str) -> Any:
    """The shipped serve file `name`'s data as YAML loads it."""
    path = SERVE_CONFIG_DIR / f"{name}.yaml"
    if not path.exists():
        slip = did_you_mean(name, serve_config_names())
        shipped = f"shipped: {yaml_text(serve_config_names())}"
        raise ConfigError("serveConfig", name, f"{SERVE_CONFIG_ALLOWED};{slip} {shipped}")
    return packaged.load_yaml(path)


def shipped_document(name: str) -> ServeDocument:
    """The shipped serve file `name`, parsed into the typed document."""
    return parse_document(load_serve_file(name), where_of(name))


# kv_role each side of a PD app may have. No engine refuses a swapped pair: vLLM 0.26's NixlConnector
# serves either way (it reads kv_role only to warn that kv_both is deprecated: vLLM 0.26.0
# distributed/kv_transfer/kv_connector/v1/nixl/connector.py NixlBaseConnector.__init__), but on GPUs the
# consumer defers freeing blocks a KV load may still read under async scheduling, vLLM's default there
# (v1/core/sched/scheduler.py Scheduler.__init__, defer_block_free): a swapped pair frees them early on decode.
PD_KV_ROLES = {"prefill": ("kv_producer", "kv_both"), "decode": ("kv_consumer", "kv_both")}


# The backends NIXL 1.3.1 has a plugin for (nixl-cu13 1.3.1: nixl_cu13.libs/nixl/libplugin_<NAME>.so).
NIXL_BACKENDS = ("AZURE_BLOB", "GDS", "GDS_MT", "GPUNETIO", "GUSLI", "INFINIA", "LIBFABRIC", "OBJ", "POSIX", "UCX")


def check_backends(configs: Mapping[str, LlmConfig], where: str) -> None:
    """The PD sides' NIXL backends: a list of NIXL's names, the same on both sides (each side's agent loads only its
    own, and a transfer needs one both have)."""
    chosen = {}
    for role, config in configs.items():
        transfer = config.engine.kv_transfer_config or KvTransferConfig()
        backends = (transfer.kv_connector_extra_config or {}).get("backends")
        key = f"{role} engine_kwargs.kv_transfer_config.kv_connector_extra_config.backends"
        if backends is not None and (isinstance(backends, str) or not isinstance(backends, Sequence)):
            raise in_serve_config(where, key, backends, f"a list of NIXL backends, e.g. [{NIXL_DEFAULT_BACKEND}]")
        for name in backends or ():
            if name not in NIXL_BACKENDS:
                hint = did_you_mean(str(name), NIXL_BACKENDS)
                raise in_serve_config(where, key, list(backends), f"NIXL's backends:{hint} {yaml_text(NIXL_BACKENDS)}")
        chosen[role] = transfer.nixl_backends
    if len(set(chosen.values())) > 1:
        raise in_serve_config(
            where,
            "kv_connector_extra_config.backends",
            {r: list(b) for r, b in chosen.items()},
            "the same on both PD sides",
        )


def check_application(doc: ServeDocument, where: str, vllm_version: str | None) -> None:
    """The rules Ray and vLLM would enforce only on the cluster, past the structure the parse holds."""
    configs = doc.roles
    if doc.pd:
        ids = {role: c.model.model_id for role, c in configs.items()}
        if ids["prefill"] != ids["decode"]:
            raise in_serve_config(where, "model_id", ids, "the same model_id for prefill and decode")
        for role, config in configs.items():
            kv_transfer = config.engine.kv_transfer_config
            if not kv_transfer:
                raise in_serve_config(
                    where, f"{role} engine_kwargs.kv_transfer_config", UNSET, "required on both PD sides"
                )
            kv_role, allowed = kv_transfer.kv_role, PD_KV_ROLES.get(role, ())
            swapped = kv_role in {r for roles in PD_KV_ROLES.values() for r in roles} - set(allowed)
            if allowed and swapped:  # a value vLLM does not know is named by the engine-argument check below
                raise in_serve_config(
                    where,
                    f"{role} engine_kwargs.kv_transfer_config.kv_role",
                    kv_role,
                    f"{' or '.join(allowed)} on the {role} side (vLLM serves a swapped pair, but on GPUs "
                    "decode would then free KV blocks a transfer may still read)",
                )
        check_backends(configs, where)
    for role, config in configs.items():
        if "placement_group_config" in config:
            raise in_serve_config(
                where, f"{role} placement_group_config", NOT_SHOWN, "left out: the stack pins each role to its pool"
            )
        if vllm_version == engine_args.vllm_arguments()["vllm_version"]:  # else vLLM checks them on start
            engine_args.check(f"{where}: {role}", to_dict(config.engine))


def check_tensor_parallel(role: str, instance_type: str, gpus_per_node: int, tensor_parallel: int) -> None:
    """Tensor parallelism shares one node's GPUs: the cause to name before any replica arithmetic."""
    if tensor_parallel > gpus_per_node:
        raise ConfigError(
            f"gpuPools.{role}.instanceType",
            instance_type,
            f"an instance with >= {tensor_parallel} GPUs for tensor_parallel_size {tensor_parallel} ({role}); "
            f"{instance_type} has {gpus_per_node} (tensor parallelism does not cross nodes here)",
        )


def with_family(config: LlmConfig, role: str, where: str, model: ModelFacts) -> LlmConfig:
    """Add the model family's settings; a serve file that sets them itself would carry them over
    to whatever model the stack switches to, so it is refused (for models of our table)."""
    config = ensure(config, "runtime_env")
    runtime_env = config.runtime_env
    if "env_vars" not in runtime_env:
        runtime_env = put(runtime_env, env_vars={})
    family = model.family
    if family is None:  # a model of the user's: their serve file says what it needs
        return put(config, runtime_env=runtime_env)
    engine, env = config.engine, dict(runtime_env.env_vars)
    for key in sorted(FAMILY_ENGINE_KEYS & set(engine)):
        raise in_serve_config(
            where,
            f"{role} engine_kwargs.{key}",
            engine[key],
            "left out: the stack adds it from the model table (ray_llm_eks/domain/serving/model_families.py) for the "
            "model served",
        )
    for key in sorted(FAMILY_ENV_KEYS & set(env)):
        raise in_serve_config(
            where,
            f"{role} runtime_env.env_vars.{key}",
            env[key],
            "left out: the stack adds it from the model table (ray_llm_eks/domain/serving/model_families.py) for the "
            "model served",
        )
    engine = put(engine, **family.engine_kwargs)
    if engine.get("kv_transfer_config") is not None:
        env.update(family.pd_env_vars)
    runtime_env = put(runtime_env, env_vars=env) if env else drop(runtime_env, "env_vars")
    config = put(config, engine_kwargs=engine)
    return put(config, runtime_env=runtime_env) if runtime_env else drop(config, "runtime_env")


# NIXL's UCX backend moves GPU memory between processes of one node over CUDA IPC, and UCX 1.21.0 (the one nixl-cu13
# 1.3.1 bundles) turns CUDA IPC GETs off where NVML counts no NVLink (src/uct/cuda/cuda_ipc/cuda_ipc_iface.c, `auto`):
# every L4, and the H100 VM measured. vLLM's pull connector then READs each request's KV through TCP over loopback,
# ~0.5 GB/s and one after another; on, a 66 MiB READ took 0.9 ms instead of 140 ms (docs/measurements.md). LIBFABRIC,
# the shipped EFA path, does not read it: only a role on UCX gets it (a new serveConfigV2 restarts every engine).
KV_TRANSFER_ENV = {"UCX_CUDA_IPC_ENABLE_GET_ZCOPY": "on"}


def moves_gpu_kv_over_ucx(transfer: KvTransferConfig) -> bool:
    """A KV transfer config whose NIXL agent reads GPU memory through UCX."""
    return "UCX" in transfer.nixl_backends and transfer.kv_buffer_device in (None, "cuda")


def with_kv_transfer_env(config: LlmConfig) -> LlmConfig:
    """A role that moves GPU KV over UCX, with the environment that keeps its reads on CUDA IPC; a serve file's own
    value stays."""
    transfer = config.engine.kv_transfer_config
    if transfer is None or not moves_gpu_kv_over_ucx(transfer):
        return config
    config = ensure(config, "runtime_env")
    env = dict(config.runtime_env.get("env_vars") or {})
    added = {key: value for key, value in KV_TRANSFER_ENV.items() if key not in env}
    if not added:
        return config
    return put(config, runtime_env=put(config.runtime_env, env_vars={**env, **added}))


def with_kv_buffer(config: LlmConfig, role: str, where: str, device: str, model: ModelFacts) -> LlmConfig:
    kv_transfer = config.engine.kv_transfer_config
    if kv_transfer is None:
        return config

    # Device memory by default, as the reference deployment runs on g6 (no GPUDirect RDMA): libfabric's
    # EFA provider moves GPU memory itself; the workers run privileged so NIXL can register it.
    def refuse(allowed: str) -> ConfigError:
        if "kv_buffer_device" in kv_transfer:
            return in_serve_config(where, f"{role} kv_transfer_config.kv_buffer_device", value, allowed)
        return ConfigError("kvBufferDevice", value, allowed)

    value = kv_transfer.get("kv_buffer_device", device)
    if value not in KV_BUFFER_DEVICES:
        raise refuse(f"one of {yaml_text(KV_BUFFER_DEVICES)}")
    if value == "cpu" and model.hybrid:
        raise refuse(HYBRID_CPU_BUFFER)
    engine = put(config.engine, kv_transfer_config=put(kv_transfer, kv_buffer_device=value))
    return put(config, engine_kwargs=engine)


def with_overrides(config: LlmConfig, role: str, overrides: ServeOverrides, where: str) -> LlmConfig:
    """The stack's model, context length and replicas over the file's."""
    config = ensure(config, "model_loading_config", "engine_kwargs", "deployment_config")
    loading, engine, deployment = config.model, config.engine, config.deployment
    if overrides.model_id:
        loading = put(loading, model_id=overrides.model_id, model_source=overrides.model_source or overrides.model_id)
    elif overrides.model_source:
        loading = put(loading, model_source=overrides.model_source)
    if overrides.max_model_len:
        engine = put(engine, max_model_len=overrides.max_model_len)
    if overrides.replicas and role in overrides.replicas:
        if "autoscaling_config" in deployment:
            raise ConfigError(f"replicas.{role}", overrides.replicas[role], f"unset: {where} autoscales {role}")
        deployment = put(deployment, num_replicas=overrides.replicas[role])
    if overrides.autoscaling and role in overrides.autoscaling:
        if overrides.replicas and role in overrides.replicas:
            raise ConfigError(f"autoscaling.{role}", overrides.autoscaling[role], f"unset while replicas.{role} is set")
        deployment = drop(deployment, "num_replicas")  # Ray Serve refuses both
        # The stack's fields over the file's: `autoscaling: {prefill: {maxReplicas: 5}}` changes one bound.
        file_bounds = deployment.autoscaling_config or AutoscalingConfig()
        deployment = put(deployment, autoscaling_config=put(file_bounds, **overrides.autoscaling[role]))
    return put(config, model_loading_config=loading, engine_kwargs=engine, deployment_config=deployment)


def check_room(config: LlmConfig, role: str, pool: PoolShape) -> None:
    """A role of fixed replicas fits the nodes its pool runs; an engine's tensor parallelism fits one node."""
    engine, deployment = config.engine, config.deployment
    replicas = deployment.get("num_replicas", 1)
    check_tensor_parallel(role, pool.instance_type, pool.gpus_per_node, engine.get("tensor_parallel_size", 1))
    gpus = engine.gpus_per_replica
    # An autoscaling role's bounds are checked against its pool's by ray_llm_eks/domain/fit/scaling.py.
    fixed = "autoscaling_config" not in deployment
    if fixed and replicas * gpus > pool.nodes * pool.gpus_per_node:
        raise ConfigError(
            f"replicas.{role}",
            replicas,
            f"at most {pool.nodes * pool.gpus_per_node // gpus}: {gpus} GPU(s) per "
            f"replica, pool {role} runs {pool.nodes} node(s) (desiredSize) x {pool.gpus_per_node} GPU(s)",
        )


def pinned(config: LlmConfig, role: str, pool: PoolShape) -> LlmConfig:
    """The config pinned to its role's pool."""
    if pool.gpu_model is not None:  # the pool resource pins the role either way
        config = put(config, accelerator_type=pool.gpu_model)
    # One bundle per GPU worker, each asking for this pool's custom resource: Ray can never
    # place a prefill engine on a decode node (both offer GPU and accelerator_type:L4).
    # A replica larger than one node spans nodes only through pipeline parallelism (tensor
    # parallelism must fit one node, model_fit checks it): then PACK, else all on one node.
    strategy = "STRICT_PACK" if config.engine.gpus_per_replica <= pool.gpus_per_node else "PACK"
    placement = PlacementGroupConfig.of(bundle_per_worker={"GPU": 1, role_resource(role): 1}, strategy=strategy)
    return put(config, placement_group_config=placement)


def overridden(
    name: str,
    overrides: ServeOverrides,
    pool_roles: Collection[str],
    vllm_version: str | None,
    own: OwnServeFile | None = None,
) -> ServeDocument:
    """The serve file `name` checked, with the stack's model, context length and replicas over the file's: what
    each role's replica bounds, and so its pools' node bounds, are read from. `pool_roles`: the roles the stack's
    pools run; `own`: the user's file `name` names (checked as the shipped ones are)."""
    where = where_of(name)
    doc = parse_document(own.document, where) if own is not None else shipped_document(name)
    if (ours := doc.application.import_path) in (SELECTIVE_PD_IMPORT, GUARDED_PD_IMPORT):
        raise in_serve_config(
            where,
            "import_path",
            ours,
            f"{PD_IMPORT}: the stack renders its own PD builders (the key check, the stack key selectivePd)",
        )
    check_application(doc, where, vllm_version)
    if set(doc.roles) != set(pool_roles):
        raise ConfigError(
            "gpuPools",
            sorted(pool_roles),
            f"exactly the pools {where} runs on: {yaml_text(sorted(doc.roles))} (one per role)",
        )
    return doc.map_roles(lambda role, config: with_overrides(config, role, overrides, where))


def render(
    doc: ServeDocument,
    name: str,
    overrides: ServeOverrides,
    pools: Mapping[str, PoolShape],
    model_facts: Callable[[str, str], ModelFacts],
) -> ServeDocument:
    """The serve config a stack deploys: the overridden serve file `name` (`overridden`) completed for its model
    family, pinned to its pools (node bounds reconciled with its replicas), checked. `model_facts(model_id,
    model_source)` answers from the model table."""
    where = where_of(name)

    def role_config(role: str, config: LlmConfig) -> LlmConfig:
        check_room(config, role, pools[role])
        model = model_facts(*config.model.id_and_source)
        config = with_kv_buffer(with_family(config, role, where, model), role, where, overrides.kv_buffer_device, model)
        return pinned(with_kv_transfer_env(config), role, pools[role])

    doc = doc.map_roles(role_config)
    if overrides.local_prefill_below is not None:
        doc = with_selective_pd(doc, where, overrides.local_prefill_below)
    return doc


def with_selective_pd(doc: ServeDocument, where: str, below: int) -> ServeDocument:
    """The PD app whose decode replicas prefill prompts shorter than `below` tokens themselves."""
    app = doc.application
    if app.import_path != PD_IMPORT:
        raise ConfigError("selectivePd", below, f"off: {where} has no prefill role for a short prompt to skip")
    decode = app.roles["decode"]
    experimental = decode.experimental_configs or {}
    if LOCAL_PREFILL_BELOW in experimental:
        raise in_serve_config(
            where, f"decode experimental_configs.{LOCAL_PREFILL_BELOW}", NOT_SHOWN, "left out: stack key selectivePd"
        )
    app = put(app, import_path=SELECTIVE_PD_IMPORT)
    decode = put(decode, experimental_configs={**experimental, LOCAL_PREFILL_BELOW: below})
    return doc.with_application(app.with_role("decode", decode))
