"""The typed serving model (ray_llm_eks/domain/serving/llm_config.py, serve_app.py) held against the pinned Ray's own
models, which the dev venv has (the program's has no Ray): each class types or passes through exactly Ray's fields,
and each typed field's JSON type is one Ray's schema allows. The app arguments' models cannot be imported without
vLLM: their fields are read from the installed Ray's source. A Ray upgrade that adds or renames a field fails here."""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pytest

from ray_llm_eks.domain.serving import engine_args, llm_config, serve_app
from ray_llm_eks.domain.serving.fields import Fields
from tools.upstream.sources import class_fields

# Classes whose Ray model imports in the dev venv, and whether ours holds all of its fields or some (the
# deployment's options: LLMConfig passes them to Serve's DeploymentSchema, whose fields we all take).
IMPORTABLE = (
    llm_config.LlmConfig,
    llm_config.ModelLoadingConfig,
    llm_config.PlacementGroupConfig,
    llm_config.AutoscalingConfig,
    llm_config.RequestRouterConfig,
    llm_config.DeploymentConfig,
    serve_app.HttpOptions,
    serve_app.ServeApplication,
    serve_app.ServeDocument,
)
# Read from Ray's source (PDServingArgs, LLMServingArgs and IngressClsConfig import vLLM).
FROM_SOURCE = (serve_app.PdAppArgs, serve_app.OpenAiAppArgs, serve_app.IngressClsConfig)
# PDServingArgs' deprecated proxy_* fields, which Ray ignores: refused here (serve_app.APP_ARGS).
IGNORED_BY_RAY = {"proxy_cls_config", "proxy_deployment_config"}
JSON_TYPES = {str: {"string"}, int: {"integer"}, float: {"number", "integer"}, bool: {"boolean"}}


def ray_model(cls: type[Fields]):
    import importlib

    module, _, name = cls.RAY_MODEL.partition(":")
    return getattr(importlib.import_module(module), name)


def ours(cls: type[Fields]) -> set[str]:
    return {*cls.typed(), *(cls.PASS_THROUGH or ())}


@pytest.mark.parametrize("cls", IMPORTABLE, ids=lambda c: c.__name__)
def test_each_class_takes_exactly_rays_fields(cls):
    assert cls.PASS_THROUGH is not None, "a mirror of a closed Ray model names what it passes through"
    assert ours(cls) == set(ray_model(cls).model_fields)
    assert not set(cls.typed()) & cls.PASS_THROUGH


@pytest.mark.parametrize("cls", FROM_SOURCE, ids=lambda c: c.__name__)
def test_the_app_arguments_are_rays(cls):
    import ray

    module, _, name = cls.RAY_MODEL.partition(":")
    source = (Path(ray.__file__).parent.parent / (module.replace(".", "/") + ".py")).read_text()
    assert ours(cls) == class_fields(source, name) - IGNORED_BY_RAY


def test_the_runtime_env_and_the_vllm_classes_type_only_known_fields():
    import inspect

    from ray.runtime_env import RuntimeEnv

    assert set(llm_config.RuntimeEnv.typed()) <= set(RuntimeEnv.known_fields)
    # Every key Ray knows without a plugin: its fields and its constructor's names (nsight for _nsight).
    names = {*RuntimeEnv.known_fields, *inspect.signature(RuntimeEnv.__init__).parameters} - {
        "self",
        "_validate",
        "kwargs",
    }
    assert ours(llm_config.RuntimeEnv) == names
    arguments = engine_args.vllm_arguments()
    engine = {*arguments["engine_args"], *arguments["frontend_args"]}
    assert set(llm_config.EngineKwargs.typed()) <= engine
    assert set(llm_config.KvTransferConfig.typed()) <= set(arguments["kv_transfer_config_fields"])


def _scalar(hint) -> type | None:
    """The scalar type of an `X | None` field (None for a mapping, a tuple or a class of ours)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if isinstance(hint, types.UnionType) else [hint]
    return args[0] if len(args) == 1 and args[0] in JSON_TYPES else None


def _json_types(prop: dict) -> set[str]:
    kinds = {prop["type"]} if "type" in prop else set()
    for option in prop.get("anyOf", []):
        kinds |= _json_types(option)
    return kinds


# Ray 2.58's LLMConfig.callback_config defaults to a class, which pydantic leaves out of the schema with a warning:
# the schema's field types, which this reads, are all there.
@pytest.mark.filterwarnings("ignore::pydantic.json_schema.PydanticJsonSchemaWarning")
@pytest.mark.parametrize("cls", IMPORTABLE, ids=lambda c: c.__name__)
def test_each_typed_scalar_has_a_json_type_ray_allows(cls):
    properties = ray_model(cls).model_json_schema()["properties"]
    hints = typing.get_type_hints(cls)
    checked = 0
    for name in cls.typed():
        kind = _scalar(hints[name])
        if kind is None:
            continue
        checked += 1
        allowed = _json_types(properties[name])
        assert JSON_TYPES[kind] & allowed, f"{cls.__name__}.{name}: ours {kind.__name__}, Ray's {sorted(allowed)}"
    assert checked or cls in (llm_config.LlmConfig, serve_app.ServeDocument), cls


def test_the_scalar_type_check_can_fail():
    """A field typed as a string where Ray's schema says integer is named."""
    properties = ray_model(serve_app.HttpOptions).model_json_schema()["properties"]
    assert not JSON_TYPES[str] & _json_types(properties["port"])
