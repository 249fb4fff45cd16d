"""`modelSpec` for a model outside ray_llm_eks/domain/serving/model_table.py's table, filled from its Hugging Face
`config.json`, naming what must still be given by hand (tools/model_spec.py reads the files:

    make model-spec CONFIG=path/to/config.json      # prints the YAML to paste into Pulumi.<stack>.yaml
).

Derived: weightDtype (torch_dtype / dtype, or the quantization), kvLayers (attention layers; of
`layer_types` only the attention ones), kvHeads, headDim, maxContext (max_position_embeddings),
stateMiBPerSequence (0 without linear-attention/SSM layers; for Gated DeltaNet layers, from their
`linear_*` shapes and `mamba_ssm_dtype` as vLLM 0.26 sizes them), linearLayers, and the head counts of
vLLM's tensor-parallel rules: attentionHeads (num_attention_heads), linearKeyHeads and linearValueHeads.
parameters: from a `model.safetensors.index.json` beside the config (its total_size / bytes per weight), else counted
for plain dense decoders (llama, mistral, qwen2, qwen3: embeddings, attention, gated MLP, norms);
anything else (MoE, hybrid, multimodal towers) must be given, e.g. from the model card.
"""

from __future__ import annotations

import copy

from ray_llm_eks.domain.serving import vllm_fit
from ray_llm_eks.domain.serving.model_table import DTYPE_BYTES, MIB

DENSE_DECODERS = ("llama", "mistral", "qwen2", "qwen3")  # q/k/v/o + gate/up/down MLP + 2 norms per layer
_ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "attention")
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "fp16": "float16", "bf16": "bfloat16"}


def text_config(config: dict) -> dict:
    """Multimodal configs keep the language model's numbers under text_config."""
    return {**config, **config["text_config"]} if isinstance(config.get("text_config"), dict) else config


def with_layers(config: dict, layers: int) -> dict:
    """A copy of the config whose language model keeps its first `layers` layers (their kinds in the model's
    order): a few-layer variant of the same architecture."""
    trimmed = copy.deepcopy(config)
    text = trimmed["text_config"] if isinstance(trimmed.get("text_config"), dict) else trimmed
    text["num_hidden_layers"] = layers
    if "layer_types" in text:
        text["layer_types"] = text["layer_types"][:layers]
    return trimmed


def _weight_dtype(config: dict) -> tuple[str | None, str]:
    quant = config.get("quantization_config") or {}
    if quant:
        method, bits = str(quant.get("quant_method", "")).lower(), quant.get("bits")
        if method == "fp8":
            return "fp8", "quantization_config.quant_method fp8"
        if bits in (4, 8):
            return f"int{bits}", f"quantization_config {method} {bits} bits"
        return None, f"quantization_config {method!r} is not one of {sorted(DTYPE_BYTES)}: give weightDtype"
    dtype = _DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    return (dtype, "torch_dtype") if dtype else (None, "no torch_dtype/dtype in config.json: give weightDtype")


def _dense_parameters(c: dict) -> int:
    hidden, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads", heads)
    head_dim = c.get("head_dim") or hidden // heads
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if c.get("attention_bias") or c["model_type"] == "qwen2":  # Qwen2 has q/k/v biases
        attention += q + 2 * kv
    if c["model_type"] == "qwen3":  # per-head RMSNorm on q and k
        attention += 2 * head_dim
    mlp = 3 * hidden * c["intermediate_size"]
    per_layer = attention + mlp + 2 * hidden
    embeddings = vocab * hidden * (1 if c.get("tie_word_embeddings") else 2)
    return layers * per_layer + embeddings + hidden


def spec_from_hf_config(raw_config: dict, index: dict | None = None) -> tuple[dict, dict[str, str]]:
    """(modelSpec fields derived, {field: why it must still be given}) from a parsed config.json and,
    when there is one beside it, the parsed model.safetensors.index.json."""
    config = text_config(raw_config)
    spec: dict = {}
    missing: dict[str, str] = {}

    dtype, why = _weight_dtype(config)
    if dtype:
        spec["weightDtype"] = dtype
    else:
        missing["weightDtype"] = why

    total_size = (index or {}).get("metadata", {}).get("total_size")
    if total_size and dtype:
        spec["parameters"] = int(total_size / DTYPE_BYTES[dtype])
    elif config.get("model_type") in DENSE_DECODERS and not config.get("num_experts"):
        spec["parameters"] = _dense_parameters(config)
    else:
        missing["parameters"] = (
            f"model_type {config.get('model_type')!r} is not a plain dense decoder {list(DENSE_DECODERS)}: "
            "take the count from the model card (every weight vLLM loads), or put model.safetensors.index.json "
            "beside config.json"
        )

    layer_types = config.get("layer_types")
    linear_layers = 0
    if isinstance(layer_types, list):
        spec["kvLayers"] = sum(t in _ATTENTION_LAYER_TYPES for t in layer_types)
        linear_layers = len(layer_types) - spec["kvLayers"]
    elif "num_hidden_layers" in config:
        spec["kvLayers"] = config["num_hidden_layers"]
    else:
        missing["kvLayers"] = "no num_hidden_layers or layer_types in config.json"

    heads = config.get("num_attention_heads")
    if heads:
        spec["attentionHeads"] = heads
        spec["kvHeads"] = config.get("num_key_value_heads", heads)
        head_dim = config.get("head_dim") or (config["hidden_size"] // heads if "hidden_size" in config else None)
        if head_dim:
            spec["headDim"] = head_dim
        else:
            missing["headDim"] = "no head_dim or hidden_size in config.json"
    else:
        missing["kvHeads"] = missing["headDim"] = "no num_attention_heads in config.json"

    if linear_layers:
        spec["linearLayers"] = linear_layers
        for field, name in (("linearKeyHeads", "linear_num_key_heads"), ("linearValueHeads", "linear_num_value_heads")):
            if name in config:
                spec[field] = config[name]
        shapes = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
        if dtype and all(k in config for k in (*shapes, "linear_conv_kernel_dim")):
            state = vllm_fit.GatedDeltaNet(
                linear_layers,
                *(config[k] for k in shapes),
                config["linear_conv_kernel_dim"],
                config.get("mamba_ssm_dtype"),
            )
            page = state.page_bytes(1, vllm_fit.DTYPE_BYTES[dtype])
            spec["stateMiBPerSequence"] = round(linear_layers * page / MIB, 2)
        else:
            missing["stateMiBPerSequence"] = (
                f"{linear_layers} linear-attention/SSM layers keep a per-sequence state: give its size in MiB "
                "(see the Qwen3.5-9B row of ray_llm_eks/domain/serving/model_table.py for the arithmetic)"
            )
    else:
        spec["stateMiBPerSequence"] = 0

    if "max_position_embeddings" in config:
        spec["maxContext"] = config["max_position_embeddings"]
    else:
        missing["maxContext"] = "no max_position_embeddings in config.json: the model card's context length"
    return spec, missing


FIELD_ORDER = (
    "parameters",
    "weightDtype",
    "kvLayers",
    "kvHeads",
    "headDim",
    "stateMiBPerSequence",
    "linearLayers",
    "maxContext",
    "attentionHeads",
    "linearKeyHeads",
    "linearValueHeads",
)


def as_yaml(spec: dict, missing: dict[str, str], source: str) -> str:
    lines = [f"  # from {source}", "  ray-llm-eks:modelSpec:"]
    for name in FIELD_ORDER:
        if name in spec:
            lines.append(f"    {name}: {spec[name]}")
        elif name in missing:
            lines.append(f"    {name}: REQUIRED  # {missing[name]}")
    return "\n".join(lines) + "\n"
