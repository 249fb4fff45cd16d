"""One LLM config of a serve application, typed as Ray Serve LLM 2.58's LLMConfig and the models inside it. The
program's venv has no Ray: these mirror Ray's models, and tests/unit/domain/serving/test_ray_mirror.py holds each
against the pinned Ray's (field names, JSON types).

Typed are the fields the stack reads or writes; the rest of Ray's (or vLLM's) fields of a class pass through in
`extra`, in place. Values are kept as the file wrote them: their types are Ray's and vLLM's to check (the vLLM table
of ray_llm_eks/domain/serving/engine_args.py for the image's vLLM, Ray's schemas in the tests)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from ray_llm_eks.domain.core.errors import in_serve_config
from ray_llm_eks.domain.core.facts import NIXL_DEFAULT_BACKEND
from ray_llm_eks.domain.serving.fields import Fields, Json, child_path, no_extra

_LLM = "ray.llm._internal.serve.core.configs.llm_config"


@dataclass(frozen=True)
class ModelLoadingConfig(Fields):
    """What the engine loads and clients name (Ray: extra fields forbidden)."""

    RAY_MODEL: ClassVar[str] = f"{_LLM}:ModelLoadingConfig"

    model_id: str | None = None
    model_source: Json = None  # a hub id or s3:// URI, or Ray's CloudMirrorConfig mapping
    tokenizer_source: str | None = None

    @property
    def source(self) -> str:
        """What vLLM loads: model_source, or model_id where it is left out (as Ray Serve LLM reads it)."""
        return self.model_source or self.model_id or ""

    @property
    def id_and_source(self) -> tuple[str, str]:
        """(model_id, source): what the model table looks it up by (ray_llm_eks/domain/serving/model_table.py)."""
        return self.model_id or "", self.source


@dataclass(frozen=True)
class KvTransferConfig(Fields):
    """vLLM's KVTransferConfig (engine_kwargs.kv_transfer_config): the PD sides' KV connector."""

    RAY_MODEL: ClassVar[str] = "vllm.config.kv_transfer:KVTransferConfig"  # vLLM's; not in the dev venv
    PASS_THROUGH: ClassVar[frozenset[str] | None] = None  # vLLM's other fields: engine_args checks their names
    CHECKS_TYPES: ClassVar[bool] = False  # engine_args checks every value against the image's vLLM, naming its rule

    kv_connector: str | None = None
    kv_role: str | None = None
    kv_buffer_device: str | None = None
    kv_connector_extra_config: Mapping[str, Json] | None = None
    extra: Mapping[str, Json] = field(default_factory=no_extra)

    @property
    def nixl_backends(self) -> tuple[str, ...]:
        """The NIXL backends the connector's agent loads: NIXL's default where unset or empty (vLLM 0.26
        nixl/base_worker.py). A serve file's value is a list of names (serve_config.check_backends)."""
        return tuple((self.kv_connector_extra_config or {}).get("backends") or (NIXL_DEFAULT_BACKEND,))


@dataclass(frozen=True)
class EngineKwargs(Fields):
    """LLMConfig.engine_kwargs, handed to vLLM: typed are the arguments the stack's checks and fit read; every other
    engine or front-end argument passes through (engine_args checks each against vLLM's table)."""

    PASS_THROUGH: ClassVar[frozenset[str] | None] = None
    NESTED: ClassVar[Mapping[str, type[Fields]]] = MappingProxyType({"kv_transfer_config": KvTransferConfig})
    CHECKS_TYPES: ClassVar[bool] = False  # engine_args checks every value against the image's vLLM, naming its rule

    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    language_model_only: bool | None = None
    mamba_ssm_cache_dtype: str | None = None
    kv_transfer_config: KvTransferConfig | None = None
    extra: Mapping[str, Json] = field(default_factory=no_extra)

    @property
    def tensor_parallel(self) -> int:
        return int(self.get("tensor_parallel_size", 1))

    @property
    def pipeline_parallel(self) -> int:
        return int(self.get("pipeline_parallel_size", 1))

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one engine: tensor x pipeline parallel (vLLM's world size without data parallelism)."""
        return self.tensor_parallel * self.pipeline_parallel


@dataclass(frozen=True)
class AutoscalingConfig(Fields):
    """Ray Serve's autoscaling_config of a deployment."""

    RAY_MODEL: ClassVar[str] = "ray.serve.config:AutoscalingConfig"
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset(
        {
            "metrics_interval_s",
            "look_back_period_s",
            "smoothing_factor",
            "upscale_smoothing_factor",
            "downscale_smoothing_factor",
            "upscaling_factor",
            "downscaling_factor",
            "downscale_to_zero_delay_s",
            "aggregation_function",
            "policy",
        }
    )

    min_replicas: int | None = None
    initial_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing_requests: float | None = None
    upscale_delay_s: float | None = None
    downscale_delay_s: float | None = None
    extra: Mapping[str, Json] = field(default_factory=no_extra)


@dataclass(frozen=True)
class RequestRouterConfig(Fields):
    """Ray Serve's request_router_config of a deployment (ray_llm_eks/domain/serving/routing.py checks its values)."""

    RAY_MODEL: ClassVar[str] = "ray.serve.config:RequestRouterConfig"

    request_router_class: str | None = None
    request_router_kwargs: Mapping[str, Json] | None = None
    request_routing_stats_period_s: float | None = None
    request_routing_stats_timeout_s: float | None = None
    initial_backoff_s: float | None = None
    backoff_multiplier: float | None = None
    max_backoff_s: float | None = None


@dataclass(frozen=True)
class DeploymentConfig(Fields):
    """LLMConfig.deployment_config: the options of the engine's Serve deployment (Ray's DeploymentSchema fields)."""

    RAY_MODEL: ClassVar[str] = "ray.serve.schema:DeploymentSchema"
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset(
        {
            "name",
            "max_ongoing_requests",
            "max_queued_requests",
            "backpressure_config",
            "user_config",
            "graceful_shutdown_wait_loop_s",
            "graceful_shutdown_timeout_s",
            "health_check_period_s",
            "health_check_timeout_s",
            "ray_actor_options",
            "placement_group_bundles",
            "placement_group_strategy",
            "placement_group_bundle_label_selector",
            "max_replicas_per_node",
            "logging_config",
            "gang_scheduling_config",
            "deployment_actors",
            "rolling_update_percentage",
        }
    )
    NESTED: ClassVar[Mapping[str, type[Fields]]] = MappingProxyType(
        {"autoscaling_config": AutoscalingConfig, "request_router_config": RequestRouterConfig}
    )

    num_replicas: int | None = None
    autoscaling_config: AutoscalingConfig | None = None
    request_router_config: RequestRouterConfig | None = None
    extra: Mapping[str, Json] = field(default_factory=no_extra)


@dataclass(frozen=True)
class RuntimeEnv(Fields):
    """Ray's runtime_env of an application or an LLM config."""

    RAY_MODEL: ClassVar[str] = "ray.runtime_env:RuntimeEnv"
    # Ray 2.58's other fields (ray/runtime_env/runtime_env.py RuntimeEnv.known_fields and its constructor's names):
    # Ray takes any other key for a plugin of that name, which the image does not have, so a typo fails only at
    # deploy, when the replicas' runtime env cannot be set up.
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset(
        {"py_modules", "py_executable", "working_dir", "pip", "conda", "container", "uv", "image_uri", "java_jars",
         "excludes", "config", "nsight", "_nsight", "rocprof_sys", "_rocprof_sys", "_ray_release", "_ray_commit",
         "_inject_current_ray"}
    )  # fmt: skip

    env_vars: Mapping[str, str] | None = None
    worker_process_setup_hook: str | None = None
    extra: Mapping[str, Json] = field(default_factory=no_extra)

    @classmethod
    def parse(cls, raw: Any, file: str, path: str) -> RuntimeEnv:
        env = raw.get("env_vars") if isinstance(raw, Mapping) else None
        where = child_path(path, "env_vars")
        if env is not None and not isinstance(env, Mapping):
            raise in_serve_config(file, where, env, "a mapping of variable names to strings (NAME: 'value')")
        for name, value in (env or {}).items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise in_serve_config(
                    file,
                    child_path(where, str(name)),
                    value,
                    "a string: Ray's runtime_env takes strings only (quote what YAML reads otherwise: 'on', '1')",
                )
        return super().parse(raw, file, path)


@dataclass(frozen=True)
class PlacementGroupConfig(Fields):
    """The bundles an engine replica's placement group asks for (Ray: extra fields forbidden)."""

    RAY_MODEL: ClassVar[str] = "ray.llm._internal.common.placement:PlacementGroupConfig"

    bundle_per_worker: Mapping[str, float] | None = None
    bundles: tuple[Mapping[str, float], ...] | None = None
    strategy: str | None = None


@dataclass(frozen=True)
class LlmConfig(Fields):
    """One model served by one Serve deployment (Ray: extra fields forbidden, so an unknown key is refused here)."""

    RAY_MODEL: ClassVar[str] = f"{_LLM}:LLMConfig"
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset(
        {"llm_engine", "accelerator_config", "lora_config", "log_engine_metrics", "callback_config"}
    )
    NESTED: ClassVar[Mapping[str, type[Fields]]] = MappingProxyType(
        {
            "model_loading_config": ModelLoadingConfig,
            "engine_kwargs": EngineKwargs,
            "deployment_config": DeploymentConfig,
            "runtime_env": RuntimeEnv,
            "placement_group_config": PlacementGroupConfig,
        }
    )

    model_loading_config: ModelLoadingConfig | None = None
    engine_kwargs: EngineKwargs | None = None
    deployment_config: DeploymentConfig | None = None
    runtime_env: RuntimeEnv | None = None
    accelerator_type: str | None = None
    placement_group_config: PlacementGroupConfig | None = None
    experimental_configs: Mapping[str, Json] | None = None
    server_cls: str | None = None  # "module:Class", imported where the app is built and in each replica
    extra: Mapping[str, Json] = field(default_factory=no_extra)

    @property
    def model(self) -> ModelLoadingConfig:
        return self.model_loading_config or ModelLoadingConfig()

    @property
    def engine(self) -> EngineKwargs:
        return self.engine_kwargs or EngineKwargs()

    @property
    def deployment(self) -> DeploymentConfig:
        return self.deployment_config or DeploymentConfig()
