"""The rules behind a new user's first-hour mistakes, called directly: vLLM's own value specs, the
nodes a role uses, modelSpec from a config.json, and the vLLM argument extractor. How `make plan`
reports them (one line, nothing written): tests/harness/offline/test_first_hour.py."""

from __future__ import annotations

import json
import zipfile

import pytest

from ray_llm_eks.domain.serving import engine_args
from tests.conftest import ROOT

# meta-llama/Llama-2-7b-hf's config.json (its published values; 6,738,415,616 parameters) and the
# architecture fields of meta-llama/Llama-3.1-8B-Instruct's.
LLAMA_2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 32000,
}


LLAMA_31_8B = LLAMA_2_7B | {
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def _spec(config: dict):
    from measure.hf_model_spec import spec_from_hf_config

    return spec_from_hf_config(config)


def test_value_specs_are_vllms_own():
    """Spot checks against vllm/config/*.py of 0.26.0 (CacheConfig: Field(default=0.92, gt=0, le=1);
    KVTransferConfig: KVRole = Literal[KVProducer, KVConsumer])."""
    data = engine_args.vllm_arguments()
    types = data["engine_arg_types"]
    assert types["gpu_memory_utilization"] == {"types": ["number"], "gt": 0, "le": 1}
    assert types["max_model_len"] == {"types": ["integer"], "ge": -1}
    assert set(data["kv_transfer_config_types"]["kv_role"]["choices"]) == {"kv_producer", "kv_consumer", "kv_both"}
    assert set(types) <= set(data["engine_args"]) and len(types) > 150
    assert "dtype" not in types, "ModelDType | torch.dtype: a type YAML cannot express stays unchecked"


@pytest.mark.parametrize(
    ("value", "spec", "bad"),
    [
        (0.92, {"types": ["number"], "gt": 0, "le": 1}, False),
        (1, {"types": ["number"], "gt": 0, "le": 1}, False),  # an int is a number (pydantic agrees)
        (True, {"types": ["integer"]}, True),  # YAML true is not a count
        (None, {"types": ["integer", "null"]}, False),
        ("x", {"types": ["null", "string"], "choices": ["a"]}, True),
        (None, {"types": ["null", "string"], "choices": ["a"]}, False),
        ({"a": 1}, {"types": ["object"]}, False),
    ],
)
def test_value_problem(value, spec, bad):
    assert engine_args.value_problem(value, spec) is bad


@pytest.mark.parametrize(
    ("replicas", "gpus_per_replica", "gpus_per_node", "nodes"),
    [(1, 1, 1, 1), (2, 1, 1, 2), (2, 2, 4, 1), (3, 2, 4, 2), (1, 8, 4, 2), (2, 8, 4, 4)],
)
def test_nodes_a_role_uses(replicas, gpus_per_replica, gpus_per_node, nodes):
    from ray_llm_eks.domain.fit.pool_use import nodes_used

    assert nodes_used(replicas, gpus_per_replica, gpus_per_node) == nodes


def test_model_spec_from_config_matches_the_table(tmp_path):
    from ray_llm_eks.domain.serving.model_table import KNOWN_MODELS

    spec, missing = _spec(LLAMA_31_8B)
    known = KNOWN_MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    assert missing == {}
    assert spec["parameters"] == 8_030_261_248 and abs(spec["parameters"] - known.parameters) / known.parameters < 1e-3
    assert (spec["kvLayers"], spec["kvHeads"], spec["headDim"]) == (known.kv_layers, known.kv_heads, known.head_dim)
    assert (spec["maxContext"], spec["weightDtype"]) == (known.max_context, known.weight_dtype)


def test_hf_model_spec_names_what_it_cannot_derive(tmp_path, capsys):
    from tools.model_spec import main

    hybrid = {"model_type": "qwen3_next", "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    (tmp_path / "config.json").write_text(json.dumps(hybrid | {"num_attention_heads": 16, "head_dim": 256}))
    assert main([str(tmp_path / "config.json")]) == 1
    captured = capsys.readouterr()
    assert "kvLayers: 1" in captured.out and "parameters: REQUIRED" in captured.out
    assert captured.err == "still to give by hand: parameters, weightDtype, stateMiBPerSequence, maxContext\n"


def test_extractor_reads_types_choices_and_bounds_from_vllm_sources(tmp_path):
    """tools/extract_vllm_engine_args.py on a miniature wheel shaped like vLLM's: EngineArgs fields
    defaulting to config-class fields, aliases imported across modules, pydantic Field bounds."""
    import importlib.util

    files = {
        "vllm/config/__init__.py": "from vllm.config.cache import CacheConfig\n",
        "vllm/config/kv_transfer.py": (
            "from typing import Literal\nKVProducer = Literal['kv_producer', 'kv_both']\n"
            "KVRole = Literal[KVProducer, 'kv_consumer']\n"
            "@config\nclass KVTransferConfig:\n    kv_role: KVRole | None = None\n    kv_port: int = 14579\n"
        ),
        "vllm/config/cache.py": (
            "from pydantic import Field\nfrom typing import Literal\nCacheDType = Literal['auto', 'fp8']\n"
            "@config\nclass CacheConfig:\n    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)\n"
            "    cache_dtype: CacheDType = 'auto'\n"
        ),
        "vllm/engine/arg_utils.py": (
            "import torch\nfrom vllm.config import CacheConfig\nfrom vllm.config.cache import CacheDType\n"
            "@dataclass\nclass EngineArgs:\n"
            "    gpu_memory_utilization: float = CacheConfig.gpu_memory_utilization\n"
            "    kv_cache_dtype: CacheDType = CacheConfig.cache_dtype\n"
            "    tokenizer_mode: Literal['auto', 'slow'] | str = 'auto'\n"
            "    dtype: str | torch.dtype = 'auto'\n"
            "    max_num_seqs: int | None = None\n"
            "@dataclass\nclass AsyncEngineArgs(EngineArgs):\n    enable_log_requests: bool = False\n"
        ),
        "vllm/entrypoints/openai/cli_args.py": (
            "@config\nclass BaseFrontendArgs:\n    default_chat_template_kwargs: dict[str, Any] | None = None\n"
            "@config\nclass FrontendArgs(BaseFrontendArgs):\n    port: int = 8000\n"
        ),
        "vllm/tool_parsers/__init__.py": (
            "_TOOL_PARSERS_TO_REGISTER = {\n    'hermes': ('hermes_tool_parser', 'Hermes2ProToolParser'),\n"
            "    'deepseek_v3': ('deepseekv3_tool_parser', 'DeepSeekV3ToolParser'),\n}\n"
        ),
        "vllm/reasoning/__init__.py": "_REASONING_PARSERS_TO_REGISTER = {'qwen3': ('qwen3', 'Qwen3')}\n",
    }
    wheel = tmp_path / "vllm-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    spec = importlib.util.spec_from_file_location("extract", ROOT / "tools" / "extract_vllm_engine_args.py")
    extract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extract)

    data = extract.extract(wheel)
    types = data["engine_arg_types"]
    assert data["engine_args"] == sorted(types | {"dtype": None})
    assert types["gpu_memory_utilization"] == {"types": ["number"], "gt": 0, "le": 1}
    assert types["kv_cache_dtype"] == {"types": ["string"], "choices": ["auto", "fp8"]}
    assert types["tokenizer_mode"] == {"types": ["string"]}, "Literal[...] | str is any string"
    assert types["max_num_seqs"] == {"types": ["integer", "null"]}
    assert types["enable_log_requests"] == {"types": ["boolean"]}
    assert "dtype" not in types, "torch.dtype cannot come from YAML: left unchecked"
    assert data["frontend_args"] == ["default_chat_template_kwargs", "port"]
    assert data["frontend_arg_types"]["default_chat_template_kwargs"] == {"types": ["null", "object"]}
    kv_role = data["kv_transfer_config_types"]["kv_role"]
    assert kv_role == {"types": ["null", "string"], "choices": ["kv_producer", "kv_both", "kv_consumer"]}
    assert data["tool_call_parsers"] == ["deepseek_v3", "hermes"] and data["reasoning_parsers"] == ["qwen3"]
