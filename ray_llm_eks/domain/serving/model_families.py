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


def _tools(parser: str) -> dict[str, object]:
    """Tool calling with `tool_choice` auto, required or a named function: vLLM 0.26 refuses a request with
    tools unless both are set (renderers/online_renderer.py: '"auto" tool choice requires
    --enable-auto-tool-choice and --tool-call-parser to be set'); `parser` is a name of vLLM 0.26's tool parser
    registry (vllm/tool_parsers/__init__.py _TOOL_PARSERS_TO_REGISTER). Front-end arguments, which Ray Serve LLM
    2.58 routes from engine_kwargs (vllm_models.py: the FrontendArgs fields)."""
    return {"enable_auto_tool_choice": True, "tool_call_parser": parser}


FAMILIES = {
    # Qwen3 writes Hermes-style calls, <tool_call>{"name": ..., "arguments": ...}</tool_call> (Qwen's vLLM
    # deployment guide: --tool-call-parser hermes; vLLM 0.26's `hermes` is Hermes2ProToolParser).
    "qwen3": ModelFamily("qwen3", engine_kwargs={**_QWEN_THINKING_OFF, **_tools("hermes")}),
    "qwen3_5": ModelFamily(
        "qwen3_5",
        # Text-only endpoint: no vision encoder weights or memory (vLLM 0.26 MultiModalConfig). Qwen3.5 writes
        # Qwen3-Coder's XML calls (<function=...><parameter=...>): its model card serves it with
        # --tool-call-parser qwen3_coder, vLLM 0.26's Qwen3EngineToolParser.
        engine_kwargs={"language_model_only": True, **_QWEN_THINKING_OFF, **_tools("qwen3_coder")},
        # NIXL's hybrid transfer asserts the DS conv-state layout on both sides (vLLM 0.26 NIXL connector).
        pd_env_vars={"VLLM_SSM_CONV_STATE_LAYOUT": "DS"},
        hybrid=True,
    ),
    # Llama 3.1 answers a tool call as JSON (vLLM 0.26 llama_tool_parser.py Llama3JsonToolParser, `llama3_json`).
    "llama3": ModelFamily("llama3", engine_kwargs=_tools("llama3_json")),
}
# Every key some family sets: a serve file must leave them to the renderer.
FAMILY_ENGINE_KEYS = frozenset(k for f in FAMILIES.values() for k in f.engine_kwargs)
FAMILY_ENV_KEYS = frozenset(k for f in FAMILIES.values() for k in f.pd_env_vars)
