"""Parsing the project's YAML (stack files, serve files, the config-key table): a syntax error is one
line naming the file, line and column and what is wrong, never a parser traceback. Reading the
files is the caller's: ray_llm_eks/domain/core/packaged.py for what ships with the code, ray_llm_eks/adapters/ for the
rest.

Two readers, because two programs read these files: Ray reads serve files with PyYAML (`parse`), the
Pulumi CLI reads Pulumi.yaml and Pulumi.<stack>.yaml with Go's gopkg.in/yaml.v3 (`parse_pulumi`)."""

from __future__ import annotations

import re
from typing import Any

import yaml


class YamlSyntaxError(ValueError):
    """A YAML file that does not parse: `file:line:column: what is wrong`."""


def parse(text: str, shown: str) -> Any:
    """`shown`: the file's name as the error line gives it."""
    return _parse(text, shown, yaml.SafeLoader)


def parse_pulumi(text: str, shown: str) -> Any:
    """A Pulumi.yaml or Pulumi.<stack>.yaml as the pinned Pulumi CLI reads it (v3.274.1: sdk/v3
    go/common/encoding/marshal.go yamlMarshaler.Unmarshal is gopkg.in/yaml.v3 v3.0.1's yaml.Unmarshal):
    a key twice in one mapping is refused, and plain scalars resolve as yaml.v3 resolves them (`_PulumiLoader`)."""
    return _parse(text, shown, _PulumiLoader)


def _parse(text: str, shown: str, loader: type) -> Any:
    try:
        return yaml.load(text, Loader=loader)  # both loaders are SafeLoaders: plain data only
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = err.problem or "invalid YAML"
        context = f" ({err.context})" if err.context else ""
        raise YamlSyntaxError(f"{where}: invalid YAML: {problem}{context}") from None
    except yaml.YAMLError as err:
        raise YamlSyntaxError(f"{shown}: invalid YAML: {' '.join(str(err).split())}") from None


# gopkg.in/yaml.v3 v3.0.1 resolve.go: YAML 1.2's core schema, not PyYAML's YAML 1.1 (`no`, `yes`, `on`,
# `off` are text; `8.03e9` and `0o17` are numbers; no base-60 `1:30`). resolveMap holds the words:
_WORDS = {
    **dict.fromkeys(("true", "True", "TRUE"), ("bool", True)),
    **dict.fromkeys(("false", "False", "FALSE"), ("bool", False)),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), ("null", None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), ("float", float("nan"))),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), ("float", float("inf"))),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), ("float", float("-inf"))),
}
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")  # resolve.go yamlStyleFloat
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?(inf|infinity|nan)", re.I)
_DATE = re.compile(r"[0-9]{4}-")  # resolve.go parseTimestamp's quick check: every timestamp starts YYYY-


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64) (or ParseUint): a sign, then decimal, 0x, 0o, 0b, or a leading 0 for octal."""
    match = re.fullmatch(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)", text)
    if not match:
        return None
    sign, digits = match.groups()
    base = {"x": 16, "o": 8, "b": 2}.get(digits[1:2].lower(), 8 if digits.startswith("0") and len(digits) > 1 else 10)
    value = int(digits[2:] if base != 10 and digits[1:2].isalpha() else digits, base)
    value = -value if sign == "-" else value
    return value if -(2**63) <= value < 2**64 else None


def _go_resolve(text: str) -> tuple[str, Any]:
    """yaml.v3 v3.0.1 resolve.go resolve() for an untagged plain scalar: (tag, value)."""
    if text in _WORDS:
        return _WORDS[text]
    hint = text[:1]
    if hint == ".":
        if _GO_FLOAT.fullmatch(text):  # strconv.ParseFloat
            return "float", float(text)
    elif hint and (hint.isdigit() or hint in "+-"):
        if _DATE.match(text):
            # A timestamp (Pulumi then hands the program Go's time.Time.String()): no key of ours takes one, so
            # it stays the text written, which every key refuses as the CLI's text would be.
            return "str", text
        plain = text.replace("_", "")
        number = _go_int(plain)
        if number is not None:
            return "int", number
        if _YAML_STYLE_FLOAT.fullmatch(plain):
            return "float", float(plain)
    return "str", text


class _PulumiLoader(yaml.SafeLoader):
    """PyYAML's parser with yaml.v3's scalar resolution and its refusal of a duplicated key (decode.go
    decoder.mapping, uniqueKeys: "mapping key ... already defined at line ...")."""

    yaml_implicit_resolvers: dict = {}  # noqa: RUF012 (PyYAML's class attribute; none of its YAML 1.1 ones)

    def construct_object(self, node, deep=False):
        if isinstance(node, yaml.ScalarNode) and node.tag == "!go" and node.style is None:
            return _go_resolve(node.value)[1]
        return super().construct_object(node, deep)

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = (key_node.tag, key_node.value) if isinstance(key_node, yaml.ScalarNode) else id(key_node)
            if key in seen:
                raise yaml.MarkedYAMLError(
                    None,
                    None,
                    f"mapping key {key_node.value!r} already defined at line {seen[key]}: the Pulumi CLI refuses "
                    "the file; keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return "!go"  # a plain scalar: its type is decided by _go_resolve as it is constructed
        return super().resolve(kind, value, implicit)
