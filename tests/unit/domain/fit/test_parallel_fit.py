"""vLLM 0.26's tensor-parallel rules for a model's heads, applied before the memory fit, and never broken by
a suggestion; the fit line of a multi-GPU engine says its budget is per GPU."""

from __future__ import annotations

import pytest

from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.fit import model_fit
from ray_llm_eks.domain.platform import prices
from ray_llm_eks.domain.serving import model_table, vllm_fit
from ray_llm_eks.domain.serving.serve_app import ServeDocument, parse_document
from tests.unit.domain.checks.test_first_hour_rules import LLAMA_31_8B
from tests.unit.domain.fit.test_vllm_fit import QWEN35_9B_TEXT_CONFIG

QWEN3_32B = "Qwen/Qwen3-32B"
PRICES = prices.INSTANCE_USD_PER_HOUR["us-east-1"]
# A dense model of the user's (modelSpec) with Qwen2.5's 28 query heads over 4 KV heads.
OWN = {
    "parameters": 60e9,
    "weightDtype": "bfloat16",
    "kvLayers": 48,
    "kvHeads": 4,
    "headDim": 128,
    "stateMiBPerSequence": 0,
    "maxContext": 32768,
    "attentionHeads": 28,
}


def _doc(model_id: str, tensor_parallel: int) -> ServeDocument:
    engine = {"max_model_len": 4096, "tensor_parallel_size": tensor_parallel, "max_num_batched_tokens": 2048}
    config = {"model_loading_config": {"model_id": model_id}, "engine_kwargs": engine}
    app = {"name": "llm", "import_path": "ray.serve.llm:build_openai_app", "args": {"llm_configs": [config]}}
    return parse_document({"applications": [app]}, "t")


def _refusal(model_id: str, tensor_parallel: int, instance_type: str, spec=None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        model_fit.fit_serving(_doc(model_id, tensor_parallel), [("collocated", instance_type)], set(), spec)
    return caught.value


@pytest.mark.parametrize(
    ("heads", "kv_heads", "linear", "tp", "refused"),
    [
        (64, 8, None, 3, "num_attention_heads 64"),  # Qwen3-32B: ModelConfig.verify_with_parallel_config
        (64, 8, None, 4, None),
        (64, 8, None, 8, None),
        (48, 6, None, 4, "num_key_value_heads 6"),  # split: kv % tp
        (24, 3, None, 8, "num_key_value_heads 3"),  # replicated: tp % kv
        (32, 8, None, 16, None),  # 8 KV heads replicated twice
        (16, 4, (16, 32), 8, None),  # Qwen3.5-9B
        (16, 4, (6, 32), 2, None),
        (16, 4, (6, 32), 4, "linear_num_key_heads 6"),
        (16, 4, (16, 12), 8, "linear_num_value_heads 12"),
    ],
)
def test_vllms_head_rules(heads, kv_heads, linear, tp, refused):
    reason = vllm_fit.tensor_parallel_refusal(tp, heads, kv_heads, linear)
    assert (reason is None) if refused is None else refused in reason, reason


def test_known_models_carry_their_heads():
    table = model_table.KNOWN_MODELS
    assert table[QWEN3_32B].attention_heads == 64 and table["Qwen/Qwen3.5-9B"].linear_heads == (16, 32)
    assert [table[f"meta-llama/Llama-3.1-{n}-Instruct"].attention_heads for n in ("8B", "70B")] == [32, 64]


@pytest.mark.parametrize(("instance_type", "accepted"), [("g6e.12xlarge", "2 or 4"), ("g6.12xlarge", "4")])
def test_tp_3_of_qwen3_32b_is_refused_naming_what_fits(instance_type, accepted):
    error = _refusal(QWEN3_32B, 3, instance_type)
    assert error.key == "collocated engine_kwargs.tensor_parallel_size" and error.value == 3
    assert f"on {instance_type} (4 GPUs) tensor_parallel_size {accepted};" in error.allowed
    assert "Total number of attention heads (64) must be divisible by tensor parallel size (3)" in error.allowed
    assert "Would fit" not in error.allowed


def test_a_model_too_large_for_the_gpu_is_offered_the_cheapest_types_that_fit_and_each_plans():
    """Llama-3.1-70B on one L4: every type and tensor-parallel size the fit accepts, cheapest first at the region's
    prices (not only the first size that fits, p5.48xlarge at TP 2); the suggestion plans as the stack."""
    llama_70b = "meta-llama/Llama-3.1-70B-Instruct"
    with pytest.raises(ConfigError) as caught:
        model_fit.fit_serving(_doc(llama_70b, 1), [("collocated", "g6.xlarge")], set(), None, prices=PRICES)
    offered = caught.value.allowed.split("cheapest first: ", 1)[1]
    assert offered.startswith("g6e.12xlarge with collocated engine_kwargs.tensor_parallel_size 4 (10.49 $/h a node), ")
    assert "p5.48xlarge" not in offered  # 55.04 $/h: not among the three cheapest
    model_fit.fit_serving(_doc(llama_70b, 4), [("collocated", "g6e.12xlarge")], set(), None)


def test_a_memory_refusal_never_suggests_a_size_the_heads_refuse():
    """28 heads at TP 4 do not fit an L4: TP 8 would pass the memory check but not the heads (28 % 8)."""
    error = _refusal("me/model", 4, "g6.12xlarge", model_table.spec_from_config(OWN))
    assert "Would fit: gpuPools.collocated.instanceType, cheapest first: g6e.12xlarge (no price here)" in error.allowed
    assert "tensor_parallel_size 8" not in error.allowed


def test_a_users_model_spec_gives_the_heads_for_tensor_parallelism():
    without = {k: v for k, v in OWN.items() if k != "attentionHeads"}
    error = _refusal("me/model", 2, "g6e.12xlarge", model_table.spec_from_config(without))
    assert error.key == "modelSpec.attentionHeads"
    assert error.allowed.startswith("required with tensor_parallel_size 2 (collocated): vLLM 0.26.0 refuses")
    hybrid = {**OWN, "attentionHeads": 16, "stateMiBPerSequence": 49.1, "linearLayers": 24, "linearKeyHeads": 16}
    error = _refusal("me/model", 2, "g6e.12xlarge", model_table.spec_from_config(hybrid))
    assert error.key == "modelSpec.linearValueHeads"
    spec = model_table.spec_from_config({**hybrid, "linearValueHeads": 12})
    assert spec.linear_heads == (16, 12)
    assert "linear_num_value_heads 12" in _refusal("me/model", 8, "g6e.48xlarge", spec).allowed


def test_hf_model_spec_reads_the_heads():
    from measure.hf_model_spec import spec_from_hf_config

    dense, _ = spec_from_hf_config(LLAMA_31_8B)
    hybrid, _ = spec_from_hf_config({"text_config": QWEN35_9B_TEXT_CONFIG})
    assert dense["attentionHeads"] == 32 and "linearKeyHeads" not in dense
    assert (hybrid["attentionHeads"], hybrid["linearKeyHeads"], hybrid["linearValueHeads"]) == (16, 16, 32)
    assert model_table.spec_from_config({**hybrid, "parameters": 9e9}).linear_heads == (16, 32)


def test_a_tensor_parallel_fit_line_says_its_budget_is_per_gpu():
    (line,) = model_fit.fit_serving(_doc(QWEN3_32B, 4), [("collocated", "g6.12xlarge")], set(), None).lines
    assert line.startswith("collocated (g6.12xlarge, L4, max_num_seqs vLLM default): per GPU, on each of the ")
    assert "engine's 4 (tensor_parallel_size 4): budget 20.56 GiB" in line
    assert line.endswith("the tokens and concurrency are the whole engine's")
    (single,) = model_fit.fit_serving(_doc("Qwen/Qwen3.5-9B", 1), [("collocated", "g6e.xlarge")], set(), None).lines
    assert "per GPU" not in single
