"""One view of each role of a rendered serve application: the model it serves, its engine arguments, its
replica bounds, the GPUs one replica takes and the context length vLLM will run it at. Built once from the
document's typed LLM configs (ray_llm_eks/domain/serving/llm_config.py); readers after the fit ask the view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.serving.fields import given
from ray_llm_eks.domain.serving.llm_config import EngineKwargs, LlmConfig

# Ray Serve 2.58 AutoscalingConfig defaults (ray/serve/config.py): min_replicas 1, max_replicas 1.
SERVE_DEFAULT_MIN, SERVE_DEFAULT_MAX = 1, 1
# max_model_len -1 ("auto"): vLLM 0.26 starts from the model's derived length and then shrinks it to the
# longest context the KV cache holds (config/model.py _get_and_verify_max_len, then the engine's auto-fit).
AUTO_MAX_MODEL_LEN = -1


def effective_max_model_len(engine: EngineKwargs, max_context: Callable[[], int] | None) -> int | None:
    """The context vLLM 0.26 runs an engine at, before any auto-fit: max_model_len when set, else (unset, or
    -1) the model's derived length, which `max_context()` gives (vllm/config/model.py _get_and_verify_max_len:
    `if max_model_len is None or max_model_len == -1: max_model_len = int(derived_max_model_len)`, the smallest
    of config.json's max_position_embeddings and its kin, model_arch_config_convertor.py
    derive_max_model_len_and_key)."""
    value = engine.max_model_len
    if value is None or value == AUTO_MAX_MODEL_LEN:
        return None if max_context is None else max_context()
    return int(value)


@dataclass(frozen=True)
class ReplicaBounds:
    """Replicas of one role's LLM deployment (fixed: min == initial == max)."""

    min: int
    initial: int
    max: int
    autoscales: bool
    gpus_per_replica: int
    where: str  # how the message names the replica side


def replica_bounds(role: str, config: LlmConfig) -> ReplicaBounds:
    gpus = config.engine.gpus_per_replica
    deployment = config.deployment
    auto = deployment.autoscaling_config
    if auto is None:
        n = given(deployment.num_replicas, 1)
        return ReplicaBounds(n, n, n, False, gpus, f"{role} num_replicas = {n}")
    low, high = given(auto.min_replicas, SERVE_DEFAULT_MIN), given(auto.max_replicas, SERVE_DEFAULT_MAX)
    initial = given(auto.initial_replicas, low)
    if not low <= initial <= high:
        raise ConfigError(
            f"autoscaling.{role}",
            {"minReplicas": low, "initialReplicas": initial, "maxReplicas": high},
            "minReplicas <= initialReplicas <= maxReplicas (Ray Serve refuses otherwise)",
        )
    where = f"{role} autoscaling min_replicas {low} .. max_replicas {high}"
    return ReplicaBounds(low, initial, high, True, gpus, where)


@dataclass(frozen=True)
class RoleView:
    """One role's LLM config as the engines will run it."""

    role: str
    model_id: str  # what clients name the model
    model_source: str  # what vLLM loads (model_id when the config leaves model_source out)
    engine: EngineKwargs
    tensor_parallel: int
    pipeline_parallel: int
    replicas: ReplicaBounds
    # effective_max_model_len: the engine's context; None where the engine leaves it to the model and the
    # reader gave no way to look the model's length up (it asked for the view without `max_context`)
    max_model_len: int | None
    max_model_len_auto: bool  # -1: vLLM shrinks max_model_len to what the KV cache holds at start

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel


def view_of(role: str, config: LlmConfig, max_context: Callable[[str, str], int] | None = None) -> RoleView:
    """`max_context(model_id, model_source)`: the model's derived maximum length (the fit's table, a
    modelSpec, or the config.json of a local model); a reader that never asks for the context length leaves it
    out."""
    model_id, source = config.model.id_and_source
    engine = config.engine
    context = None if max_context is None else lambda: max_context(model_id, source)
    return RoleView(
        role=role,
        model_id=model_id,
        model_source=source,
        engine=engine,
        tensor_parallel=engine.tensor_parallel,
        pipeline_parallel=engine.pipeline_parallel,
        replicas=replica_bounds(role, config),
        max_model_len=effective_max_model_len(engine, context),
        max_model_len_auto=engine.max_model_len == AUTO_MAX_MODEL_LEN,
    )


def views_of(
    configs: Mapping[str, LlmConfig], max_context: Callable[[str, str], int] | None = None
) -> dict[str, RoleView]:
    """The view of each role's LLM config (a document's `roles`), keyed by role."""
    return {role: view_of(role, config, max_context) for role, config in configs.items()}
