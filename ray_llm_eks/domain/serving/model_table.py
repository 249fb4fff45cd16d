"""The model table: the facts that decide a model's GPU memory, per known model (from its config.json and
model card) or from a stack's `modelSpec`, and vLLM's own measurements of a model's runtime memory."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ray_llm_eks.domain.core.errors import UNSET, ConfigError, did_you_mean, mapping_of, unknown_field, yaml_text
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.serving import vllm_fit
from ray_llm_eks.domain.serving.model_families import FAMILIES, ModelFamily

if TYPE_CHECKING:
    from ray_llm_eks.domain.serving.serve_app import ServeDocument

GIB = 1024**3
MIB = 1024**2
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "int8": 1, "int4": 0.5}


@dataclass(frozen=True)
class Measured:
    """One engine start's memory, from vLLM 0.26's own log lines ("Model loading took", "Available
    KV cache memory"), at the budget the run gave vLLM."""

    max_num_seqs: int
    cudagraphs: bool  # torch.compile + CUDA graphs (vLLM's default) or enforce_eager
    weights_gib: float
    kv_cache_gib: float
    budget_gib: float
    # The compiled graphs loaded from vLLM's compile cache ("Directly load the compiled graph(s)"): the
    # profiling pass then runs without torch.compile, whose memory is in a cold start's activation peak
    # (1.98 GiB cold, 0.42 GiB from the cache: Qwen3.5-9B, 2048 batched tokens).
    compile_cache: bool = False

    @property
    def reserve_gib(self) -> float:
        return self.budget_gib - self.weights_gib - self.kv_cache_gib


@dataclass(frozen=True)
class Calibration:
    """A model's runtime reserve and weights as vLLM measured them, at one max_num_batched_tokens and TP 1."""

    source: str  # where it was measured (docs/measurements.md has when)
    max_num_batched_tokens: int
    points: tuple[Measured, ...]
    emulated: bool  # measured on a larger GPU at this GPU's budget: its reserve may differ on the real one

    def reserve_gib(self, max_num_seqs: int, cudagraphs: bool, compile_cache: bool = False) -> float:
        """With CUDA graphs: the least-squares line through the measured points of the same kind of start
        (cold, or compiled graphs from the cache when such points exist; reserve vs max_num_seqs); eager:
        the largest eager reserve measured."""
        if not cudagraphs:
            return max(p.reserve_gib for p in self.points if not p.cudagraphs)
        warm = compile_cache and any(p.cudagraphs and p.compile_cache for p in self.points)
        graph = [(p.max_num_seqs, p.reserve_gib) for p in self.points if p.cudagraphs and p.compile_cache == warm]
        n = len(graph)
        mean_s = sum(s for s, _ in graph) / n
        mean_r = sum(r for _, r in graph) / n
        spread = sum((s - mean_s) ** 2 for s, _ in graph)
        slope = sum((s - mean_s) * (r - mean_r) for s, r in graph) / spread if spread else 0.0
        return mean_r + slope * (max_num_seqs - mean_s)

    def weights_overhead_gib(self, computed_gib: float) -> float:
        """What vLLM holds after loading beyond the parameters (buffers such as the rotary cache)."""
        return max(sum(p.weights_gib for p in self.points) / len(self.points) - computed_gib, 0.0)


# Qwen3.5-9B on one H200 with gpu_memory_utilization scaled so that the budget equals an L4's (0.92 x 22,888
# MiB): the runs and their conditions are docs/measurements.md's "GPU: vLLM 0.26 memory lines" and "GPU
# rehearsal".
_L4_BUDGET_GIB = 0.92 * 22888 / 1024
QWEN35_9B_L4 = Calibration(
    source="H200 at the L4 budget, vLLM 0.26.0 (docs/measurements.md)",
    max_num_batched_tokens=2048,
    points=(
        Measured(256, True, 16.8, 1.17, _L4_BUDGET_GIB),  # refused: 72 Mamba blocks
        Measured(64, True, 16.8, 1.39, _L4_BUDGET_GIB),
        Measured(78, True, 16.8, 1.34, _L4_BUDGET_GIB),  # the rendered dev stack, PD prefill and decode alike
        Measured(78, True, 16.8, 2.93, _L4_BUDGET_GIB, compile_cache=True),  # the same, restarted
        Measured(64, False, 16.8, 3.15, _L4_BUDGET_GIB),  # PD prefill, eager
        Measured(64, False, 16.8, 3.22, _L4_BUDGET_GIB),  # PD decode, eager
    ),
    emulated=True,
)


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
    linear: vllm_fit.LinearState | None = None  # the linear-attention layers' state shapes
    calibration: Calibration | None = None
    attention_heads: int | None = None  # num_attention_heads (query heads); None: a modelSpec without it

    @property
    def linear_heads(self) -> tuple[int, int] | None:
        """(linear_num_key_heads, linear_num_value_heads) of the linear-attention layers; None without them
        or when a modelSpec does not give them."""
        heads = (getattr(self.linear, "key_heads", None), getattr(self.linear, "value_heads", None))
        return None if None in heads else heads

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


# Dense transformers in bf16: no linear-attention state. Llama 3.1: its shared shape stated once.
_dense_bf16 = partial(ModelSpec, weight_dtype="bfloat16", state_mib_per_sequence=0.0)
_llama31 = partial(_dense_bf16, kv_heads=8, head_dim=128, max_context=131072, gated=True, family=FAMILIES["llama3"])

# Known models. Each row's numbers come from the model's config.json / model card on Hugging Face.
KNOWN_MODELS: dict[str, ModelSpec] = {
    # Qwen/Qwen3.5-9B config.json (text part qwen3_5_text): 32 layers, full attention every 4th
    # (8 layers) with 16 query heads and 4 KV heads x 256; the other 24 are Gated DeltaNet (16 key
    # heads, 32 value heads, head dims 128, conv kernel 4, mamba_ssm_dtype float32). Checkpoint 9,653,108,208 parameters
    # (19.3 GB bf16). Counted from config.json (hidden 4096, MLP 12288, vocab 248320, untied
    # embeddings): text model 8,953,803,264; vision tower (27 blocks x 1152) 456,010,480; MTP head
    # 243,290,624. Which values are confirmed against the published files: docs/architecture.md.
    "Qwen/Qwen3.5-9B": ModelSpec(
        parameters=9.653108208e9,
        weight_dtype="bfloat16",
        kv_layers=8,
        kv_heads=4,
        head_dim=256,
        attention_heads=16,
        # 24 x (32 x 128 x 128 x 4 B fp32 SSM state + 3 x 8192 x 2 B conv state) = 49.1 MiB.
        state_mib_per_sequence=24 * (32 * 128 * 128 * 4 + 3 * 8192 * 2) / MIB,
        max_context=262144,
        family=FAMILIES["qwen3_5"],
        vision_parameters=0.45601048e9,
        mtp_parameters=0.243290624e9,
        linear=vllm_fit.GatedDeltaNet(
            layers=24,
            key_heads=16,
            value_heads=32,
            key_head_dim=128,
            value_head_dim=128,
            conv_kernel=4,
            ssm_dtype="float32",
        ),
        calibration=QWEN35_9B_L4,
    ),
    # meta-llama/Llama-3.1-8B-Instruct and -70B-Instruct config.json: 32 and 80 layers, 32 and 64 attention
    # heads, 8 KV heads, head_dim 128 (4096/32, 8192/64), max_position_embeddings 131072; 8.03B and 70.6B
    # parameters (model cards).
    "meta-llama/Llama-3.1-8B-Instruct": _llama31(parameters=8.03e9, kv_layers=32, attention_heads=32),
    "meta-llama/Llama-3.1-70B-Instruct": _llama31(parameters=70.6e9, kv_layers=80, attention_heads=64),
    # Qwen/Qwen3-32B config.json: 64 layers, 64 attention heads, 8 KV heads, head_dim 128,
    # max_position_embeddings 40960; 32.8B parameters (model card).
    "Qwen/Qwen3-32B": _dense_bf16(
        parameters=32.8e9,
        kv_layers=64,
        kv_heads=8,
        head_dim=128,
        max_context=40960,
        family=FAMILIES["qwen3"],
        attention_heads=64,
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
# Optional: the number of linear-attention layers, required with a per-sequence state (vLLM pads
# each layer's state up to a whole attention page, so the count decides the page and the pool); the
# head counts vLLM's tensor-parallel rules need (config.json num_attention_heads, linear_num_key_heads,
# linear_num_value_heads), required with tensor_parallel_size > 1.
_OPTIONAL_SPEC_FIELDS = {"linearLayers": int, "attentionHeads": int, "linearKeyHeads": int, "linearValueHeads": int}
SPEC_SHAPE = mapping_of({**_SPEC_FIELDS, **_OPTIONAL_SPEC_FIELDS})


def load(raw: RawConfig) -> ModelSpec | None:
    """The stack's `modelSpec` section (unset: the table knows the model)."""
    given = raw.mapping("modelSpec", SPEC_SHAPE)
    return None if given is None else spec_from_config(given)


def spec_from_config(raw: Mapping) -> ModelSpec:
    """A `modelSpec` stack value for a model not in KNOWN_MODELS (every field required)."""
    fields = {**_SPEC_FIELDS, **_OPTIONAL_SPEC_FIELDS}
    if not isinstance(raw, Mapping):
        raise ConfigError("modelSpec", raw, SPEC_SHAPE)
    for name, value in raw.items():
        if name not in fields:
            raise unknown_field("modelSpec", name, value, fields)
        kind = fields[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ConfigError(f"modelSpec.{name}", value, "a string" if kind is str else "a number")
        may_be_zero = name in ("kvLayers", "stateMiBPerSequence", "linearLayers")  # pure SSM / attention
        if kind is not str and (value < 0 or (value == 0 and not may_be_zero)):
            raise ConfigError(f"modelSpec.{name}", value, "a positive number")
    missing = sorted(set(_SPEC_FIELDS) - set(raw))
    if missing:
        raise ConfigError(
            f"modelSpec.{missing[0]}", UNSET, f"required; modelSpec needs {yaml_text(sorted(_SPEC_FIELDS))}"
        )
    if raw["weightDtype"] not in DTYPE_BYTES:
        raise ConfigError("modelSpec.weightDtype", raw["weightDtype"], f"one of {yaml_text(sorted(DTYPE_BYTES))}")
    state, linear_layers = float(raw["stateMiBPerSequence"]), raw.get("linearLayers", 0)
    if state > 0 and not linear_layers:
        raise ConfigError(
            "modelSpec.linearLayers",
            raw.get("linearLayers", UNSET),
            "the number of linear-attention/SSM layers, required with stateMiBPerSequence > 0 (vLLM pads "
            "each layer's state to a whole attention page: the count decides the block size and the pool)",
        )
    return ModelSpec(
        parameters=float(raw["parameters"]),
        weight_dtype=raw["weightDtype"],
        kv_layers=raw["kvLayers"],
        kv_heads=raw["kvHeads"],
        head_dim=raw["headDim"],
        state_mib_per_sequence=state,
        max_context=raw["maxContext"],
        linear=vllm_fit.OpaqueState(
            linear_layers, int(state * MIB / linear_layers), raw.get("linearKeyHeads"), raw.get("linearValueHeads")
        )
        if state > 0
        else None,
        attention_heads=raw.get("attentionHeads"),
    )


def model_spec(model_id: str, model_source: str, override: ModelSpec | None) -> ModelSpec:
    if override is not None:
        return override
    spec = KNOWN_MODELS.get(model_source) or KNOWN_MODELS.get(model_id)
    if spec is None:
        # A slip of the id first (case too: hub ids are case-sensitive), then the way to a model of one's own. A
        # model of another size is another model, not a slip (Qwen/Qwen3-4B is not Qwen/Qwen3-32B).
        size = _size(model_source)
        by_case = {known.lower(): known for known in KNOWN_MODELS if size is None or _size(known) in (None, size)}
        hint = did_you_mean(model_source.lower(), by_case)
        raise ConfigError(
            "modelSource" if model_source != model_id else "modelId",
            model_source,
            f"a model whose memory facts the fit knows;{hint} known: {yaml_text(sorted(KNOWN_MODELS))}; for "
            "another model, `make model-spec CONFIG=<its config.json>` prints the modelSpec to add to the stack",
        )
    return spec


def _size(model: str) -> str | None:
    """A model id's parameter count as its name writes it (Qwen3.5-9B -> 9b, Llama-3.1-70B -> 70b), or None."""
    found = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", model.rsplit("/", 1)[-1])
    return f"{found.group(1)}b" if found else None


def gated_models(document: ServeDocument) -> list[str]:
    """Known gated models the serve document loads (they need hfToken)."""
    sources = {config.model.source for config in document.roles.values()}
    return sorted(s for s in sources if s in KNOWN_MODELS and KNOWN_MODELS[s].gated)
