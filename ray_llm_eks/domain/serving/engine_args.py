"""vLLM engine arguments of a serve file, checked by name AND value before any resource exists.

Ray Serve LLM hands `engine_kwargs` to vLLM unchecked, and vLLM refuses a bad one only when the engine
starts on a GPU node (`gpu_memory_utilization: 1.5`, `kv_role: kv_prodcer`). The names, types, choices
and bounds are vLLM's own, extracted from its wheel by tools/extract_vllm_engine_args.py into
ray_llm_eks/domain/data/vllm_engine_args.json. YAML already types its values, so a value must have the type vLLM
declares: `max_model_len: "4096"` (a string) is refused although pydantic might coerce it, since our
own checks (model fit) and Ray read it as a number too.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from ray_llm_eks.domain.core import packaged
from ray_llm_eks.domain.core.errors import NOT_SHOWN, did_you_mean, in_serve_config, yaml_text

VLLM_ARGS_FILE = packaged.DATA / "vllm_engine_args.json"
_BOUNDS = {"gt": (">", float.__gt__), "ge": (">=", float.__ge__), "lt": ("<", float.__lt__), "le": ("<=", float.__le__)}
_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "string": "a string",
    "null": "null",
    "object": "a mapping",
    "array": "a list",
}


@cache
def vllm_arguments() -> dict:
    """vLLM engine argument names and value specs for one vLLM version."""
    return packaged.load_json(VLLM_ARGS_FILE)


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def describe(spec: Mapping) -> str:
    """What a spec allows, in words: 'one of [...]', 'a number > 0 and <= 1'."""
    parts = []
    choices = spec.get("choices") or []
    for kind in spec["types"]:
        own = [c for c in choices if json_type(c) == kind]
        if own:
            parts.append(f"one of {yaml_text(own)}")
            continue
        words = _TYPE_WORDS.get(kind, kind)
        if kind in ("integer", "number"):
            bounds = [f"{_BOUNDS[b][0]} {spec[b]}" for b in _BOUNDS if b in spec]
            words += f" {' and '.join(bounds)}" if bounds else ""
        parts.append(words)
    return " or ".join(parts)


def value_problem(value, spec: Mapping) -> bool:
    """True if `value` is outside what vLLM declares for it."""
    kind = json_type(value)
    allowed = set(spec["types"])
    if kind == "integer" and "number" in allowed:
        kind = "number"  # pydantic takes an int for a float
    if kind not in allowed:
        return True
    choices = [c for c in spec.get("choices") or [] if json_type(c) == json_type(value)]
    if choices and value not in choices:
        return True
    if kind in ("integer", "number"):
        return any(b in spec and not _BOUNDS[b][1](float(value), float(spec[b])) for b in _BOUNDS)
    return False


def check(where: str, engine_kwargs: Mapping) -> None:
    """Every engine or front-end argument (and kv_transfer_config field) is one vLLM knows, with a
    value it accepts.
    `where` names the file and role, e.g. 'ray_llm_eks/serve_configs/pd-disaggregated.yaml: prefill'."""
    data = vllm_arguments()
    version = data["vllm_version"]
    # Ray Serve LLM hands the keys that are vLLM FrontendArgs fields to the OpenAI front end, the rest
    # to the engine: both are valid engine_kwargs.
    names = sorted({*data["engine_args"], *data["frontend_args"]})
    specs = {**data["frontend_arg_types"], **data["engine_arg_types"]}
    groups = [("engine_kwargs", engine_kwargs, names, specs, "engine or front-end argument")]
    kv_transfer = engine_kwargs.get("kv_transfer_config")
    if isinstance(kv_transfer, Mapping):
        groups.append(
            (
                "engine_kwargs.kv_transfer_config",
                kv_transfer,
                data["kv_transfer_config_fields"],
                data["kv_transfer_config_types"],
                "KVTransferConfig field",
            )
        )
    for prefix, values, names, specs, what in groups:
        for key, value in values.items():
            if key not in names:
                raise in_serve_config(
                    where,
                    f"{prefix}.{key}",
                    NOT_SHOWN,
                    f"not a vLLM {version} {what};{did_you_mean(key, names)} see {VLLM_ARGS_FILE.name}"
                    + (f": {yaml_text(names)}" if len(names) < 30 else " (EngineArgs fields)"),
                )
            spec = specs.get(key)
            if spec is not None and value_problem(value, spec):
                raise in_serve_config(
                    where,
                    f"{prefix}.{key}",
                    value,
                    f"{describe(spec)} (vLLM {version} {what} {key}, from {VLLM_ARGS_FILE.name})",
                )
    check_parsers(where, engine_kwargs)


# Arguments naming a parser of a vLLM registry, the registry's list in the arguments file, and the argument that
# loads a plugin registering more names (any name passes then).
PARSERS = {
    "tool_call_parser": ("tool_call_parsers", "tool_parser_plugin"),
    "reasoning_parser": ("reasoning_parsers", "reasoning_parser_plugin"),
}


def check_parsers(where: str, engine_kwargs: Mapping) -> None:
    """A parser name vLLM registers (vllm/tool_parsers, vllm/reasoning), and tool calling with its parser: vLLM
    0.26 refuses `enable_auto_tool_choice` without `tool_call_parser` at start (entrypoints/openai/cli_args.py
    validate_parsed_serve_args) and an unregistered name when the front end starts (parser_manager.py)."""
    data = vllm_arguments()
    for key, (registry, plugin) in PARSERS.items():
        name = engine_kwargs.get(key)
        if name is None or engine_kwargs.get(plugin):
            continue
        if name not in data[registry]:
            allowed = f"a name vLLM {data['vllm_version']} registers;{did_you_mean(str(name), data[registry])} "
            raise in_serve_config(where, f"engine_kwargs.{key}", name, f"{allowed}{yaml_text(data[registry])}")
    if engine_kwargs.get("enable_auto_tool_choice") and engine_kwargs.get("tool_call_parser") is None:
        raise in_serve_config(
            where,
            "engine_kwargs.enable_auto_tool_choice",
            True,
            f"with tool_call_parser: vLLM {data['vllm_version']} refuses to start without one",
        )
