"""The serving application: a Ray Serve config file from serve_configs/, with the stack's overrides,
pinned to the GPU pools, rendered into the RayService's `serveConfigV2`.

Ray validates these files only when the cluster starts them, and passes `engine_kwargs` to vLLM
unchecked, so this module repeats the rules that would otherwise fail on a GPU node 25 minutes in:
the PD rules of Ray's PDServingArgs (which cannot be imported without vLLM), and vLLM's engine
argument names for the image's vLLM version. The tests also run Ray's own schemas on the result.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from domain.errors import ConfigError

SERVE_CONFIG_DIR = Path(__file__).resolve().parent.parent / "serve_configs"
VLLM_ARGS_FILE = Path(__file__).resolve().parent / "data" / "vllm_engine_args.json"

PD_IMPORT = "ray.serve.llm:build_pd_openai_app"
COLLOCATED_IMPORT = "ray.serve.llm:build_openai_app"
# Fields of Ray 2.58 PDServingArgs and LLMServingArgs we accept (the deprecated, ignored proxy_*
# fields of PDServingArgs are refused: they would silently do nothing).
APP_ARGS = {
    PD_IMPORT: {"prefill_config", "decode_config", "ingress_cls_config", "ingress_deployment_config"},
    COLLOCATED_IMPORT: {"llm_configs", "ingress_cls_config", "ingress_deployment_config"},
}
PD_ARG_ROLES = {"prefill_config": "prefill", "decode_config": "decode"}
COLLOCATED_ROLE = "collocated"


def role_resource(role: str) -> str:
    """The Ray custom resource a worker group of this role advertises and its LLM deployment asks for."""
    return f"pool_{role}"


def serve_config_names() -> list[str]:
    return sorted(p.stem for p in SERVE_CONFIG_DIR.glob("*.yaml"))


@cache
def vllm_argument_names() -> dict:
    """vLLM engine argument names for one vLLM version (domain/data/vllm_engine_args.json)."""
    return json.loads(VLLM_ARGS_FILE.read_text())


@dataclass(frozen=True)
class ServeOverrides:
    """What a stack may change in the serve file without editing it."""

    model_id: str | None = None
    model_source: str | None = None
    max_model_len: int | None = None
    replicas: Mapping[str, int] | None = None


@dataclass(frozen=True)
class PoolShape:
    """What the renderer needs to know about the GPU pool a role runs on."""

    gpu_model: str
    gpus_per_node: int
    nodes: int  # nodes that run (desiredSize): nothing scales the pools by itself
    gpudirect_rdma: bool = False


def load_serve_file(name: str) -> dict:
    path = SERVE_CONFIG_DIR / f"{name}.yaml"
    if not path.exists():
        raise ConfigError("serveConfig", name, f"a file in serve_configs/: {serve_config_names()}")
    return yaml.safe_load(path.read_text())


def the_application(doc: dict, where: str) -> dict:
    apps = doc.get("applications")
    if not isinstance(apps, list) or len(apps) != 1:
        raise ConfigError("serveConfig", where, "exactly one application under `applications:`")
    app = apps[0]
    if app.get("import_path") not in APP_ARGS:
        raise ConfigError(
            "serveConfig", f"{where}: import_path {app.get('import_path')!r}", f"one of {sorted(APP_ARGS)}"
        )
    return app


def llm_configs_by_role(doc: dict, where: str) -> dict[str, dict]:
    """The LLM configs of the application, keyed by the pool role each one runs on."""
    app = the_application(doc, where)
    args = app.get("args") or {}
    if app["import_path"] == PD_IMPORT:
        return {role: args[key] for key, role in PD_ARG_ROLES.items() if key in args}
    configs = args.get("llm_configs") or []
    if len(configs) != 1:
        raise ConfigError("serveConfig", where, "exactly one entry in llm_configs (one model per stack)")
    return {COLLOCATED_ROLE: configs[0]}


def check_application(doc: dict, where: str, vllm_version: str | None) -> None:
    """The rules Ray and vLLM would enforce only on the cluster."""
    app = the_application(doc, where)
    args = app.get("args") or {}
    unknown = sorted(set(args) - APP_ARGS[app["import_path"]])
    if unknown:
        raise ConfigError(
            "serveConfig",
            f"{where}: args.{unknown[0]}",
            f"args of {app['import_path']}: {sorted(APP_ARGS[app['import_path']])}",
        )
    configs = llm_configs_by_role(doc, where)
    if app["import_path"] == PD_IMPORT:
        for key in PD_ARG_ROLES:
            if key not in args:
                raise ConfigError("serveConfig", f"{where}: args.{key}", "required by build_pd_openai_app")
        ids = {role: (c.get("model_loading_config") or {}).get("model_id") for role, c in configs.items()}
        if ids["prefill"] != ids["decode"]:
            raise ConfigError("serveConfig", f"{where}: model_id {ids}", "the same model_id for prefill and decode")
        for role, config in configs.items():
            if not (config.get("engine_kwargs") or {}).get("kv_transfer_config"):
                raise ConfigError(
                    "serveConfig", f"{where}: {role} engine_kwargs.kv_transfer_config", "required on both PD sides"
                )
    names = vllm_argument_names()
    for role, config in configs.items():
        if "placement_group_config" in config:
            raise ConfigError(
                "serveConfig",
                f"{where}: {role} placement_group_config",
                "left out: the stack pins each role to its pool",
            )
        if vllm_version != names["vllm_version"]:
            continue  # no argument list for this vLLM: checked by vLLM itself on start
        engine_kwargs = config.get("engine_kwargs") or {}
        for key in engine_kwargs:
            if key not in names["engine_args"]:
                raise ConfigError(
                    "serveConfig",
                    f"{where}: {role} engine_kwargs.{key}",
                    f"a vLLM {names['vllm_version']} engine argument (EngineArgs field; see {VLLM_ARGS_FILE.name})",
                )
        for key in engine_kwargs.get("kv_transfer_config") or {}:
            if key not in names["kv_transfer_config_fields"]:
                raise ConfigError(
                    "serveConfig",
                    f"{where}: {role} engine_kwargs.kv_transfer_config.{key}",
                    f"a KVTransferConfig field of vLLM {names['vllm_version']}: {names['kv_transfer_config_fields']}",
                )


def render(
    name: str,
    overrides: ServeOverrides,
    pools: Mapping[str, PoolShape],
    vllm_version: str | None,
) -> dict:
    """The serve config a stack deploys: the file, overridden, pinned to its pools, checked."""
    where = f"serve_configs/{name}.yaml"
    doc = copy.deepcopy(load_serve_file(name))
    check_application(doc, where, vllm_version)
    configs = llm_configs_by_role(doc, where)
    if set(configs) != set(pools):
        raise ConfigError(
            "gpuPools", sorted(pools), f"exactly the pools {where} runs on: {sorted(configs)} (one per role)"
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
        replicas = deployment.get("num_replicas", 1)
        gpus_per_replica = engine.get("tensor_parallel_size", 1) * engine.get("pipeline_parallel_size", 1)
        if replicas * gpus_per_replica > pool.nodes * pool.gpus_per_node:
            raise ConfigError(
                f"replicas.{role}",
                replicas,
                f"at most {pool.nodes * pool.gpus_per_node // gpus_per_replica}: {gpus_per_replica} GPU(s) per "
                f"replica, pool {role} runs {pool.nodes} node(s) (desiredSize) x {pool.gpus_per_node} GPU(s)",
            )
        kv_transfer = engine.get("kv_transfer_config")
        if kv_transfer is not None and "kv_buffer_device" not in kv_transfer:
            # Without GPUDirect RDMA, NIXL's libfabric plugin cannot hand GPU memory to EFA
            # (nixl src/plugins/libfabric/README: "GDR support is currently required"): stage the
            # KV cache in host memory, as vLLM allows for hybrid models ("Host buffer" in its matrix).
            kv_transfer["kv_buffer_device"] = "cuda" if pool.gpudirect_rdma else "cpu"
        config["accelerator_type"] = pool.gpu_model
        # One bundle per GPU worker, each asking for this pool's custom resource: Ray can never
        # place a prefill engine on a decode node (both offer GPU and accelerator_type:L4).
        # A replica larger than one node spans nodes only through pipeline parallelism (tensor
        # parallelism must fit one node, model_fit checks it): then PACK, else all on one node.
        config["placement_group_config"] = {
            "bundle_per_worker": {"GPU": 1, role_resource(role): 1},
            "strategy": "STRICT_PACK" if gpus_per_replica <= pool.gpus_per_node else "PACK",
        }
    return doc


def to_yaml(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=120)
