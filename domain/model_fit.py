"""Will the model fit? Weights, KV cache and runtime memory against the GPUs of each role's pool,
checked offline before any resource is declared (instead of Ray workers crash-looping on the GPU
nodes 25 minutes into `pulumi up`).

Per GPU:  weights / (TP x PP)
        + KV cache of ONE full max_model_len sequence (K and V, KV layers / PP, KV heads / TP)
        + per-sequence state of linear-attention layers
        + runtime reserve
  must fit  GPU memory CUDA sees x gpu_memory_utilization.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from domain import aws_facts
from domain.errors import ConfigError
from domain.model_families import FAMILIES, ModelFamily
from domain.serve_config import check_tensor_parallel, llm_configs_by_role

GIB = 1024**3
MIB = 1024**2
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.26 CacheConfig default (vllm/config/cache.py)
# max_model_len -1 ("auto"): vLLM picks the longest context that fits (vllm/config/model.py); we then
# check only that a minimal context fits beside the weights.
AUTO_MAX_MODEL_LEN = -1
MIN_CONTEXT_TOKENS = 16

# What vLLM needs per GPU besides weights and KV cache (vLLM V1 gpu_worker.determine_available_memory
# counts weights + activation peak of the profiling pass + non-torch memory + CUDA graphs against
# total x gpu_memory_utilization). Logs of 8B models: activation peak 1.19-1.26 GiB at 8192 batched
# tokens, ~0.2-0.4 GiB at 2048; non-torch 0.05-0.35 GiB at TP 1 and ~1.8 GiB more per GPU at TP 2
# (NCCL buffers; vllm PR #10511); CUDA graphs 0.3-0.9 GiB ("Estimated CUDA graph memory: 0.84 GiB",
# Llama-3.1-8B). So: 2 GiB at TP 1 with <= 2048 batched tokens, +1 GiB above, +1.8 GiB with TP/PP > 1.
RUNTIME_RESERVE_GIB = 2.0
LARGE_BATCH_EXTRA_GIB = 1.0
MULTI_GPU_EXTRA_GIB = 1.8
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # the larger of vLLM's defaults, so unset is not optimistic


@dataclass(frozen=True)
class ModelSpec:
    """The facts that decide a model's GPU memory (and whether Hugging Face wants a token)."""

    parameters: float  # every weight in the checkpoint
    weight_dtype: str
    kv_layers: int  # layers that keep a KV cache
    kv_heads: int
    head_dim: int
    state_mib_per_sequence: float  # linear-attention (SSM/DeltaNet) state of one sequence, all layers
    max_context: int
    gated: bool = False  # Hugging Face asks for an accepted licence and a token
    family: ModelFamily | None = None  # None: a model of the user's (modelSpec); no settings added
    vision_parameters: float = 0.0  # not loaded with language_model_only
    mtp_parameters: float = 0.0  # multi-token-prediction head: vLLM skips it unless speculating

    @property
    def hybrid(self) -> bool:
        """Linear-attention layers: from the family, or (a modelSpec of the user's) per-sequence state."""
        return self.family.hybrid if self.family is not None else self.state_mib_per_sequence > 0

    def loaded_parameters(self, language_model_only: bool) -> float:
        """What vLLM loads. Qwen3.5's load_weights skips `mtp.` always (AutoWeightsLoader
        skip_prefixes=["mtp."], vllm 0.26 qwen3_5.py); language_model_only replaces the vision tower
        with a stub without weights (_mark_tower_model)."""
        vision = self.vision_parameters if language_model_only else 0.0
        return self.parameters - self.mtp_parameters - vision

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        return 2 * self.kv_layers * self.kv_heads * self.head_dim * kv_bytes


# Known models. Each row's numbers come from the model's config.json / model card on Hugging Face.
KNOWN_MODELS: dict[str, ModelSpec] = {
    # Qwen/Qwen3.5-9B config.json (text part qwen3_5_text): 32 layers, full attention every 4th
    # (8 layers) with 4 KV heads x 256; the other 24 are Gated DeltaNet. Checkpoint 9,653,108,208
    # parameters (19.3 GB bf16). Counted from config.json (hidden 4096, MLP 12288, vocab 248320,
    # untied embeddings): text model 8,953,803,264; vision tower (27 blocks x 1152) 456,010,480;
    # MTP head 243,290,624. DeltaNet state of one sequence: 24 layers x 32 value heads x 128 x 128
    # x 4 B (fp32, the largest SSM cache dtype) + conv state.
    "Qwen/Qwen3.5-9B": ModelSpec(
        parameters=9.653108208e9,
        weight_dtype="bfloat16",
        kv_layers=8,
        kv_heads=4,
        head_dim=256,
        state_mib_per_sequence=50.0,
        max_context=262144,
        family=FAMILIES["qwen3_5"],
        vision_parameters=0.45601048e9,
        mtp_parameters=0.243290624e9,
    ),
    # meta-llama/Llama-3.1-8B-Instruct config.json: 32 layers, 8 KV heads, head_dim 128 (4096/32),
    # max_position_embeddings 131072; 8.03B parameters (model card).
    "meta-llama/Llama-3.1-8B-Instruct": ModelSpec(
        parameters=8.03e9,
        weight_dtype="bfloat16",
        kv_layers=32,
        kv_heads=8,
        head_dim=128,
        state_mib_per_sequence=0.0,
        max_context=131072,
        gated=True,
        family=FAMILIES["llama3"],
    ),
    # meta-llama/Llama-3.1-70B-Instruct config.json: 80 layers, 8 KV heads, head_dim 128 (8192/64),
    # max_position_embeddings 131072; 70.6B parameters (model card).
    "meta-llama/Llama-3.1-70B-Instruct": ModelSpec(
        parameters=70.6e9,
        weight_dtype="bfloat16",
        kv_layers=80,
        kv_heads=8,
        head_dim=128,
        state_mib_per_sequence=0.0,
        max_context=131072,
        gated=True,
        family=FAMILIES["llama3"],
    ),
    # Qwen/Qwen3-32B config.json: 64 layers, 8 KV heads, head_dim 128, max_position_embeddings
    # 40960; 32.8B parameters (model card).
    "Qwen/Qwen3-32B": ModelSpec(
        parameters=32.8e9,
        weight_dtype="bfloat16",
        kv_layers=64,
        kv_heads=8,
        head_dim=128,
        state_mib_per_sequence=0.0,
        max_context=40960,
        family=FAMILIES["qwen3"],
    ),
}

_SPEC_FIELDS = {
    "parameters": (int, float),
    "weightDtype": str,
    "kvLayers": int,
    "kvHeads": int,
    "headDim": int,
    "stateMiBPerSequence": (int, float),
    "maxContext": int,
}


def spec_from_config(raw: Mapping) -> ModelSpec:
    """A `modelSpec` stack value for a model not in KNOWN_MODELS (every field required)."""
    for name, value in raw.items():
        if name not in _SPEC_FIELDS:
            raise ConfigError(f"modelSpec.{name}", value, f"unknown field; fields: {sorted(_SPEC_FIELDS)}")
        kind = _SPEC_FIELDS[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ConfigError(f"modelSpec.{name}", value, "a string" if kind is str else "a number")
        may_be_zero = name in ("kvLayers", "stateMiBPerSequence")  # pure SSM / pure attention models
        if kind is not str and (value < 0 or (value == 0 and not may_be_zero)):
            raise ConfigError(f"modelSpec.{name}", value, "a positive number")
    missing = sorted(set(_SPEC_FIELDS) - set(raw))
    if missing:
        raise ConfigError(f"modelSpec.{missing[0]}", None, f"required; modelSpec needs {sorted(_SPEC_FIELDS)}")
    if raw["weightDtype"] not in DTYPE_BYTES:
        raise ConfigError("modelSpec.weightDtype", raw["weightDtype"], f"one of {sorted(DTYPE_BYTES)}")
    return ModelSpec(
        parameters=float(raw["parameters"]),
        weight_dtype=raw["weightDtype"],
        kv_layers=raw["kvLayers"],
        kv_heads=raw["kvHeads"],
        head_dim=raw["headDim"],
        state_mib_per_sequence=float(raw["stateMiBPerSequence"]),
        max_context=raw["maxContext"],
    )


@dataclass(frozen=True)
class Engine:
    """The vLLM settings of one role that decide memory."""

    max_model_len: int
    tensor_parallel: int
    pipeline_parallel: int
    gpu_memory_utilization: float
    kv_cache_dtype: str  # "auto" = the weights' dtype
    max_num_batched_tokens: int = VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    language_model_only: bool = False

    @classmethod
    def from_engine_kwargs(cls, kwargs: Mapping) -> Engine:
        return cls(
            max_model_len=kwargs["max_model_len"],
            tensor_parallel=kwargs.get("tensor_parallel_size", 1),
            pipeline_parallel=kwargs.get("pipeline_parallel_size", 1),
            gpu_memory_utilization=kwargs.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION),
            kv_cache_dtype=kwargs.get("kv_cache_dtype", "auto"),
            max_num_batched_tokens=kwargs.get("max_num_batched_tokens", VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS),
            language_model_only=bool(kwargs.get("language_model_only", False)),
        )

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def reserve_gib(self) -> float:
        return (
            RUNTIME_RESERVE_GIB
            + (LARGE_BATCH_EXTRA_GIB if self.max_num_batched_tokens > 2048 else 0.0)
            + (MULTI_GPU_EXTRA_GIB if self.gpus > 1 else 0.0)
        )


@dataclass(frozen=True)
class Budget:
    """Per-GPU memory, in bytes."""

    weights: float
    kv_cache: float
    state: float
    reserve: float
    available: float

    @property
    def needed(self) -> float:
        return self.weights + self.kv_cache + self.state + self.reserve

    @property
    def fits(self) -> bool:
        return self.needed <= self.available


def _kv_bytes(model: ModelSpec, engine: Engine) -> float:
    if engine.kv_cache_dtype in ("auto", None):
        return DTYPE_BYTES[model.weight_dtype]
    return 1 if engine.kv_cache_dtype.startswith("fp8") else DTYPE_BYTES.get(engine.kv_cache_dtype, 2)


def per_gpu_kv_bytes_per_token(model: ModelSpec, engine: Engine) -> float:
    layers = math.ceil(model.kv_layers / engine.pipeline_parallel)
    heads = max(1, math.ceil(model.kv_heads / engine.tensor_parallel))  # replicated when TP > heads
    return 2 * layers * heads * model.head_dim * _kv_bytes(model, engine)


def budget(model: ModelSpec, engine: Engine, gpu_memory_mib: int) -> Budget:
    return Budget(
        weights=model.loaded_parameters(engine.language_model_only) * DTYPE_BYTES[model.weight_dtype] / engine.gpus,
        kv_cache=per_gpu_kv_bytes_per_token(model, engine) * engine.max_model_len,
        state=model.state_mib_per_sequence * MIB / engine.gpus,
        reserve=engine.reserve_gib * GIB,
        available=gpu_memory_mib * MIB * engine.gpu_memory_utilization,
    )


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _hosts(model: ModelSpec, engine: Engine, need_efa: bool) -> list[str]:
    """Instance types (from our table) on which this engine fits, smallest first."""
    fitting = [
        (spec.gpus, spec.gpu_memory_mib, spec.vcpus, name)
        for name, spec in aws_facts.INSTANCE_SPECS.items()
        if spec.gpus >= engine.gpus and (spec.efa or not need_efa) and budget(model, engine, spec.gpu_memory_mib).fits
    ]
    return [name for *_, name in sorted(fitting)]


def _alternatives(model: ModelSpec, engine: Engine, spec: aws_facts.InstanceSpec, need_efa: bool) -> list[str]:
    """What would fit: a shorter context, a larger GPU, more tensor parallelism."""
    ideas = []
    b = budget(model, engine, spec.gpu_memory_mib)
    room = b.available - b.weights - b.state - b.reserve
    if room > 0:
        ideas.append(f"max_model_len <= {int(room // per_gpu_kv_bytes_per_token(model, engine))} on this GPU")
    hosts = _hosts(model, engine, need_efa)
    if hosts:
        ideas.append(f"a larger GPU at the same parallelism: {', '.join(hosts[:3])}")
    for tp in (2, 4, 8):
        wider = replace(engine, tensor_parallel=tp)
        if tp > engine.tensor_parallel and (hosts := _hosts(model, wider, need_efa)):
            ideas.append(f"tensor_parallel_size {tp} on an instance with >= {wider.gpus} GPUs ({', '.join(hosts[:3])})")
            break
    return ideas


def check_role(
    role: str, model_id: str, model: ModelSpec, engine: Engine, instance_type: str, need_efa: bool
) -> Budget:
    """Raise ConfigError if one role's LLM config cannot run on its pool's instance type."""
    spec = aws_facts.INSTANCE_SPECS[instance_type]
    key = f"gpuPools.{role}"
    if engine.max_model_len > model.max_context:
        raise ConfigError(
            "maxModelLen", engine.max_model_len, f"at most {model.max_context}, the maximum context of {model_id}"
        )
    check_tensor_parallel(role, instance_type, spec.gpus, engine.tensor_parallel)
    b = budget(model, engine, spec.gpu_memory_mib)
    if not b.fits:
        short = b.needed - b.available
        raise ConfigError(
            key,
            instance_type,
            f"{model_id} does not fit the {role} GPU ({spec.gpu_model}, {_gib(spec.gpu_memory_mib * MIB)} x "
            f"gpu_memory_utilization {engine.gpu_memory_utilization} = {_gib(b.available)}): needs "
            f"{_gib(b.needed)} per GPU (weights {_gib(b.weights)} + KV cache for {engine.max_model_len} tokens "
            f"{_gib(b.kv_cache)} + state {_gib(b.state)} + runtime {_gib(b.reserve)}), short by {_gib(short)}. "
            f"Would fit: {'; '.join(_alternatives(model, engine, spec, need_efa)) or 'nothing in our instance table'}",
        )
    return b


def model_spec(model_id: str, model_source: str, override: ModelSpec | None) -> ModelSpec:
    if override is not None:
        return override
    spec = KNOWN_MODELS.get(model_source) or KNOWN_MODELS.get(model_id)
    if spec is None:
        raise ConfigError(
            "modelSpec",
            None,
            f"the memory facts of {model_source} (not in domain/model_fit.py: {sorted(KNOWN_MODELS)}); "
            f"set modelSpec with {sorted(_SPEC_FIELDS)}",
        )
    return spec


def check_fit(
    document: dict, instance_types: Mapping[str, str], efa_roles: set[str], override: ModelSpec | None
) -> dict[str, Budget]:
    """Check every LLM config of a rendered serve document against its pool's instance type."""
    budgets = {}
    for role, config in llm_configs_by_role(document, "rendered").items():
        loading = config.get("model_loading_config") or {}
        model_id = loading.get("model_id", "")
        spec = model_spec(model_id, loading.get("model_source") or model_id, override)
        kwargs = config.get("engine_kwargs") or {}
        # Without max_model_len vLLM takes the model's whole context: so do we.
        engine = Engine.from_engine_kwargs({"max_model_len": spec.max_context, **kwargs})
        if engine.max_model_len == AUTO_MAX_MODEL_LEN:
            engine = replace(engine, max_model_len=MIN_CONTEXT_TOKENS)
        budgets[role] = check_role(role, model_id, spec, engine, instance_types[role], role in efa_roles)
    return budgets


def gated_models(document: dict) -> list[str]:
    """Known gated models the serve document loads (they need hfToken)."""
    sources = {
        (c.get("model_loading_config") or {}).get("model_source")
        or (c.get("model_loading_config") or {}).get("model_id")
        for c in llm_configs_by_role(document, "rendered").values()
    }
    return sorted(s for s in sources if s in KNOWN_MODELS and KNOWN_MODELS[s].gated)
