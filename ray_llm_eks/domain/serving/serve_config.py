"""The serving application: a Ray Serve config file from ray_llm_eks/serve_configs/, with the stack's overrides,
pinned to the GPU pools, rendered into the RayService's `serveConfigV2`.

Ray validates these files only when the cluster starts them, and passes `engine_kwargs` to vLLM
unchecked, so this module repeats the rules that would otherwise fail on a GPU node 25 minutes in:
the PD rules of Ray's PDServingArgs (which cannot be imported without vLLM), and vLLM's engine
argument names for the image's vLLM version. The tests also run Ray's own schemas on the result.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from ray_llm_eks.domain.core import packaged
from ray_llm_eks.domain.core.errors import NOT_SHOWN, UNSET, ConfigError, did_you_mean, in_serve_config, yaml_text
from ray_llm_eks.domain.core.facts import COLLOCATED_ROLE, PD_ROLES, POOL_RESOURCE_PREFIX
from ray_llm_eks.domain.serving import engine_args, routing
from ray_llm_eks.domain.serving.model_families import FAMILY_ENGINE_KEYS, FAMILY_ENV_KEYS, ModelFamily
from ray_llm_eks.domain.serving.serve_app import (
    APP_ARGS,
    GUARDED_PD_IMPORT,
    LOCAL_PREFILL_BELOW,
    PD_ARG_ROLES,
    PD_IMPORT,
    PD_IMPORTS,
    SELECTIVE_PD_IMPORT,
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


def load_serve_file(name: str) -> dict:
    path = SERVE_CONFIG_DIR / f"{name}.yaml"
    if not path.exists():
        slip = did_you_mean(name, serve_config_names())
        shipped = f"shipped: {yaml_text(serve_config_names())}"
        raise ConfigError("serveConfig", name, f"{SERVE_CONFIG_ALLOWED};{slip} {shipped}")
    return packaged.load_yaml(path)


def the_application(doc: dict, where: str) -> dict:
    apps = doc.get("applications")
    if not isinstance(apps, list) or len(apps) != 1:
        raise in_serve_config(where, "applications", NOT_SHOWN, "exactly one application")
    app = apps[0]
    if app.get("import_path") not in APP_ARGS:
        raise in_serve_config(where, "import_path", app.get("import_path"), f"one of {yaml_text(sorted(APP_ARGS))}")
    return app


def served_model_id(doc: dict, where: str) -> str:
    """The model's id as clients name it: every role serves the same model (the serve-config rules check it)."""
    return next(iter(llm_configs_by_role(doc, where).values()))["model_loading_config"]["model_id"]


def model_of(config: Mapping) -> tuple[str, str]:
    """(model_id, model_source) of one LLM config; the source defaults to the id, as Ray Serve LLM's does."""
    loading = config.get("model_loading_config") or {}
    model_id = loading.get("model_id", "")
    return model_id, loading.get("model_source") or model_id


def llm_configs_by_role(doc: dict, where: str) -> dict[str, dict]:
    """The LLM configs of the application, keyed by the pool role each one runs on."""
    app = the_application(doc, where)
    args = app.get("args") or {}
    if app["import_path"] in PD_IMPORTS:
        return {role: args[key] for key, role in PD_ARG_ROLES.items() if key in args}
    configs = args.get("llm_configs") or []
    if len(configs) != 1:
        raise in_serve_config(where, "args.llm_configs", NOT_SHOWN, "exactly one entry (one model per stack)")
    return {COLLOCATED_ROLE: configs[0]}


def local_prefill_below(doc: dict, where: str = "rendered") -> int | None:
    """selective PD's threshold as the decode config carries it (None: the app always splits)."""
    decode = llm_configs_by_role(doc, where).get("decode") or {}
    return (decode.get("experimental_configs") or {}).get(LOCAL_PREFILL_BELOW)


# kv_role each side of a PD app may have. No engine refuses a swapped pair: vLLM 0.26's NixlConnector
# serves either way (it reads kv_role only to warn that kv_both is deprecated: vLLM 0.26.0
# distributed/kv_transfer/kv_connector/v1/nixl/connector.py NixlBaseConnector.__init__), but on GPUs the
# consumer defers freeing blocks a KV load may still read under async scheduling, vLLM's default there
# (v1/core/sched/scheduler.py Scheduler.__init__, defer_block_free): a swapped pair frees them early on decode.
PD_KV_ROLES = {"prefill": ("kv_producer", "kv_both"), "decode": ("kv_consumer", "kv_both")}


def check_application(doc: dict, where: str, vllm_version: str | None) -> None:
    """The rules Ray and vLLM would enforce only on the cluster."""
    app = the_application(doc, where)
    args = app.get("args") or {}
    unknown = sorted(set(args) - APP_ARGS[app["import_path"]])
    if unknown:
        raise in_serve_config(
            where,
            f"args.{unknown[0]}",
            NOT_SHOWN,
            f"not an argument of {app['import_path']};{did_you_mean(unknown[0], APP_ARGS[app['import_path']])} "
            f"arguments: {yaml_text(sorted(APP_ARGS[app['import_path']]))}",
        )
    configs = llm_configs_by_role(doc, where)
    if app["import_path"] in PD_IMPORTS:
        for key in PD_ARG_ROLES:
            if key not in args:
                raise in_serve_config(where, f"args.{key}", UNSET, "required by build_pd_openai_app")
        ids = {role: (c.get("model_loading_config") or {}).get("model_id") for role, c in configs.items()}
        if ids["prefill"] != ids["decode"]:
            raise in_serve_config(where, "model_id", ids, "the same model_id for prefill and decode")
        for role, config in configs.items():
            kv_transfer = (config.get("engine_kwargs") or {}).get("kv_transfer_config")
            if not kv_transfer:
                raise in_serve_config(
                    where, f"{role} engine_kwargs.kv_transfer_config", UNSET, "required on both PD sides"
                )
            kv_role, allowed = kv_transfer.get("kv_role"), PD_KV_ROLES.get(role, ())
            swapped = kv_role in {r for roles in PD_KV_ROLES.values() for r in roles} - set(allowed)
            if allowed and swapped:  # a value vLLM does not know is named by the engine-argument check below
                raise in_serve_config(
                    where,
                    f"{role} engine_kwargs.kv_transfer_config.kv_role",
                    kv_role,
                    f"{' or '.join(allowed)} on the {role} side (vLLM serves a swapped pair, but on GPUs "
                    "decode would then free KV blocks a transfer may still read)",
                )
    for entry in app.get("deployments") or []:  # the application's per-deployment overrides
        if isinstance(entry, dict) and "request_router_config" in entry:
            name = f"{where}: deployments[{entry.get('name')}].request_router_config"
            routing.check_request_router_config(name, entry["request_router_config"])
    for role, config in configs.items():
        router = (config.get("deployment_config") or {}).get("request_router_config")
        if router is not None:
            routing.check_request_router_config(f"{where}: {role} deployment_config.request_router_config", router)
        if "placement_group_config" in config:
            raise in_serve_config(
                where, f"{role} placement_group_config", NOT_SHOWN, "left out: the stack pins each role to its pool"
            )
        if vllm_version == engine_args.vllm_arguments()["vllm_version"]:  # else vLLM checks them on start
            engine_args.check(f"{where}: {role}", config.get("engine_kwargs") or {})


def gpus_per_replica(engine_kwargs: Mapping) -> int:
    """GPUs of one engine: tensor x pipeline parallel (vLLM's world size without data parallelism)."""
    return int(engine_kwargs.get("tensor_parallel_size", 1)) * int(engine_kwargs.get("pipeline_parallel_size", 1))


def check_tensor_parallel(role: str, instance_type: str, gpus_per_node: int, tensor_parallel: int) -> None:
    """Tensor parallelism shares one node's GPUs: the cause to name before any replica arithmetic."""
    if tensor_parallel > gpus_per_node:
        raise ConfigError(
            f"gpuPools.{role}.instanceType",
            instance_type,
            f"an instance with >= {tensor_parallel} GPUs for tensor_parallel_size {tensor_parallel} ({role}); "
            f"{instance_type} has {gpus_per_node} (tensor parallelism does not cross nodes here)",
        )


def _apply_family(config: dict, role: str, where: str, model: ModelFacts) -> None:
    """Add the model family's settings; a serve file that sets them itself would carry them over
    to whatever model the stack switches to, so it is refused (for models of our table)."""
    engine = config["engine_kwargs"]
    env = config.setdefault("runtime_env", {}).setdefault("env_vars", {})
    family = model.family
    if family is None:
        return  # a model of the user's: their serve file says what it needs
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
    engine.update(copy.deepcopy(dict(family.engine_kwargs)))
    if engine.get("kv_transfer_config") is not None:
        env.update(family.pd_env_vars)
    if not env:
        del config["runtime_env"]["env_vars"]
    if not config["runtime_env"]:
        del config["runtime_env"]


def _kv_buffer(config: dict, role: str, where: str, device: str, model: ModelFacts) -> None:
    kv_transfer = config["engine_kwargs"].get("kv_transfer_config")
    if kv_transfer is None:
        return

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
    kv_transfer["kv_buffer_device"] = value


def render(
    name: str,
    overrides: ServeOverrides,
    pools: Mapping[str, PoolShape],
    vllm_version: str | None,
    model_facts: Callable[[str, str], ModelFacts],
    own: OwnServeFile | None = None,
) -> dict:
    """The serve config a stack deploys: the file, overridden, completed for its model family,
    pinned to its pools, checked. `model_facts(model_id, model_source)` answers from the model table; `own`: the
    user's file `name` names (checked as the shipped ones are)."""
    where = where_of(name)
    doc = copy.deepcopy(own.document if own is not None else load_serve_file(name))
    if (ours := the_application(doc, where)["import_path"]) in (SELECTIVE_PD_IMPORT, GUARDED_PD_IMPORT):
        raise in_serve_config(
            where,
            "import_path",
            ours,
            f"{PD_IMPORT}: the stack renders its own PD builders (the key check, the stack key selectivePd)",
        )
    check_application(doc, where, vllm_version)
    configs = llm_configs_by_role(doc, where)
    if set(configs) != set(pools):
        raise ConfigError(
            "gpuPools", sorted(pools), f"exactly the pools {where} runs on: {yaml_text(sorted(configs))} (one per role)"
        )
    for role, config in configs.items():
        pool = pools[role]
        loading = config.setdefault("model_loading_config", {})
        if overrides.model_id:
            loading["model_id"] = overrides.model_id
            loading["model_source"] = overrides.model_source or overrides.model_id
        elif overrides.model_source:
            loading["model_source"] = overrides.model_source
        engine = config.setdefault("engine_kwargs", {})
        if overrides.max_model_len:
            engine["max_model_len"] = overrides.max_model_len
        deployment = config.setdefault("deployment_config", {})
        if overrides.replicas and role in overrides.replicas:
            if "autoscaling_config" in deployment:
                raise ConfigError(f"replicas.{role}", overrides.replicas[role], f"unset: {where} autoscales {role}")
            deployment["num_replicas"] = overrides.replicas[role]
        if overrides.autoscaling and role in overrides.autoscaling:
            if overrides.replicas and role in overrides.replicas:
                raise ConfigError(
                    f"autoscaling.{role}", overrides.autoscaling[role], f"unset while replicas.{role} is set"
                )
            deployment.pop("num_replicas", None)  # Ray Serve refuses both
            # The stack's fields over the file's: `autoscaling: {prefill: {maxReplicas: 5}}` changes one bound.
            file_bounds = deployment.get("autoscaling_config", {})
            deployment["autoscaling_config"] = {**file_bounds, **overrides.autoscaling[role]}
        replicas = deployment.get("num_replicas", 1)
        check_tensor_parallel(role, pool.instance_type, pool.gpus_per_node, engine.get("tensor_parallel_size", 1))
        gpus = gpus_per_replica(engine)
        # An autoscaling role's bounds are checked against its pool's by ray_llm_eks/domain/fit/scaling.py.
        fixed = "autoscaling_config" not in deployment
        if fixed and replicas * gpus > pool.nodes * pool.gpus_per_node:
            raise ConfigError(
                f"replicas.{role}",
                replicas,
                f"at most {pool.nodes * pool.gpus_per_node // gpus}: {gpus} GPU(s) per "
                f"replica, pool {role} runs {pool.nodes} node(s) (desiredSize) x {pool.gpus_per_node} GPU(s)",
            )
        model = model_facts(*model_of(config))
        _apply_family(config, role, where, model)
        _kv_buffer(config, role, where, overrides.kv_buffer_device, model)
        if pool.gpu_model is not None:  # the pool resource pins the role either way
            config["accelerator_type"] = pool.gpu_model
        # One bundle per GPU worker, each asking for this pool's custom resource: Ray can never
        # place a prefill engine on a decode node (both offer GPU and accelerator_type:L4).
        # A replica larger than one node spans nodes only through pipeline parallelism (tensor
        # parallelism must fit one node, model_fit checks it): then PACK, else all on one node.
        config["placement_group_config"] = {
            "bundle_per_worker": {"GPU": 1, role_resource(role): 1},
            "strategy": "STRICT_PACK" if gpus <= pool.gpus_per_node else "PACK",
        }
    if overrides.local_prefill_below is not None:
        _selective_pd(doc, where, overrides.local_prefill_below)
    return doc


def _selective_pd(doc: dict, where: str, below: int) -> None:
    """The PD app whose decode replicas prefill prompts shorter than `below` tokens themselves."""
    app = the_application(doc, where)
    if app["import_path"] != PD_IMPORT:
        raise ConfigError("selectivePd", below, f"off: {where} has no prefill role for a short prompt to skip")
    experimental = app["args"]["decode_config"].setdefault("experimental_configs", {})
    if LOCAL_PREFILL_BELOW in experimental:
        raise in_serve_config(
            where, f"decode experimental_configs.{LOCAL_PREFILL_BELOW}", NOT_SHOWN, "left out: stack key selectivePd"
        )
    app["import_path"] = SELECTIVE_PD_IMPORT
    experimental[LOCAL_PREFILL_BELOW] = below


def to_yaml(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=120)
