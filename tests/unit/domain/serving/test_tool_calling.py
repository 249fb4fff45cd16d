"""Tool calling: every model family of the table is served with vLLM 0.26's auto tool choice and a parser vLLM
registers for it; a serve file's own parser is checked against vLLM's registry."""

from __future__ import annotations

import pytest

from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.serving import engine_args, model_families, model_table
from tests.conftest import settings_of

REGISTERED = engine_args.vllm_arguments()


def test_every_family_names_a_tool_parser_and_a_reasoning_parser_vllm_registers():
    for family in model_families.FAMILIES.values():
        kwargs = family.engine_kwargs
        assert kwargs["enable_auto_tool_choice"] is True, family.name
        assert kwargs["tool_call_parser"] in REGISTERED["tool_call_parsers"], family.name
        assert kwargs.get("reasoning_parser", "qwen3") in REGISTERED["reasoning_parsers"], family.name


@pytest.mark.parametrize(
    ("model", "parser"),
    [
        ("Qwen/Qwen3.5-9B", "qwen3_coder"),
        ("Qwen/Qwen3-32B", "hermes"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
    ],
)
def test_each_known_model_is_rendered_with_its_familys_parser(model, parser):
    assert model_table.KNOWN_MODELS[model].family.engine_kwargs["tool_call_parser"] == parser


def test_the_shipped_stacks_serve_tools():
    for stack in ("dev", "baseline", "tp"):
        for role, config in settings_of(stack=stack).serving.serve_document.roles.items():
            assert config.engine["enable_auto_tool_choice"] is True, (stack, role)
            assert config.engine["tool_call_parser"], (stack, role)


@pytest.mark.parametrize(
    ("kwargs", "key", "allowed"),
    [
        ({"tool_call_parser": "qwen3", "enable_auto_tool_choice": True}, "tool_call_parser", "qwen3_coder"),
        ({"reasoning_parser": "qwen"}, "reasoning_parser", "did you mean qwen3?"),
        ({"enable_auto_tool_choice": True}, "enable_auto_tool_choice", "with tool_call_parser"),
    ],
)
def test_a_serve_files_parser_is_one_vllm_registers(kwargs, key, allowed):
    with pytest.raises(ConfigError) as caught:
        engine_args.check("my-serve.yaml: collocated", kwargs)
    assert caught.value.key == f"collocated engine_kwargs.{key}" and allowed in caught.value.allowed, caught.value


def test_a_plugins_parser_passes():
    engine_args.check(
        "my-serve.yaml: collocated",
        {"enable_auto_tool_choice": True, "tool_call_parser": "mine", "tool_parser_plugin": "/opt/mine.py"},
    )
