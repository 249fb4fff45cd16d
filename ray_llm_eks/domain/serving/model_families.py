"""Model families: the serve settings a family of models needs. The renderer adds them for the model
a stack serves (ray_llm_eks/domain/serving/serve_config.py), so they never carry over when `modelId` moves to another
family; a serve file leaves them out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelFamily:
    """Serve settings a model family needs. The renderer adds them for the model being served, so
    they never carry over to a model of another family (ray_llm_eks/domain/serving/serve_config.py)."""

    name: str
    engine_kwargs: Mapping[str, object] = field(default_factory=dict)  # added to every LLM config
    pd_env_vars: Mapping[str, str] = field(default_factory=dict)  # runtime env of both PD sides
    # Linear-attention (Mamba/DeltaNet) layers hand NIXL a list [conv, ssm] per layer, not one tensor.
    hybrid: bool = False


# Qwen3 and Qwen3.5 think by default; vLLM 0.26 registers one parser, `qwen3`, for both
# (vllm/reasoning/__init__.py), which reads the `enable_thinking` chat-template switch
# (vllm/parser/qwen3.py). default_chat_template_kwargs is a vLLM front-end argument
# (entrypoints/openai/cli_args.py: '{"enable_thinking": false}' "to disable thinking mode by default
# for Qwen3/DeepSeek models"); Ray Serve LLM 2.58 routes it from engine_kwargs to the front end.
# A request can still ask for thinking with chat_template_kwargs.
_QWEN_THINKING_OFF = {"reasoning_parser": "qwen3", "default_chat_template_kwargs": {"enable_thinking": False}}
FAMILIES = {
    "qwen3": ModelFamily("qwen3", engine_kwargs=_QWEN_THINKING_OFF),
    "qwen3_5": ModelFamily(
        "qwen3_5",
        # Text-only endpoint: no vision encoder weights or memory (vLLM 0.26 MultiModalConfig).
        engine_kwargs={"language_model_only": True, **_QWEN_THINKING_OFF},
        # NIXL's hybrid transfer asserts the DS conv-state layout on both sides (vLLM 0.26 NIXL connector).
        pd_env_vars={"VLLM_SSM_CONV_STATE_LAYOUT": "DS"},
        hybrid=True,
    ),
    "llama3": ModelFamily("llama3"),
}
# Every key some family sets: a serve file must leave them to the renderer.
FAMILY_ENGINE_KEYS = frozenset(k for f in FAMILIES.values() for k in f.engine_kwargs)
FAMILY_ENV_KEYS = frozenset(k for f in FAMILIES.values() for k in f.pd_env_vars)
