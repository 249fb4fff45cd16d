"""The one error type for a bad stack value (shared by config and the serve-config renderer), and the one
function that writes its line: `[file: ]invalid config <key> = <value>: <what is allowed>`, the value
written as YAML writes it (users write YAML: `null`, `false`, `'1.35'`, `[a, b]`), never a Python repr."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, KeysView, Mapping, Set, ValuesView
from typing import Any

import yaml

from ray_llm_eks.domain.core.facts import PROJECT


class _Unset:
    """A key or field the stack leaves out (as opposed to one set to `null`)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
# A value the line must not show: the key is unknown, so whether it holds a secret is unknown too.
NOT_SHOWN: Any = _Unset()
MAX_VALUE = 100  # characters of a value the line shows
DOCS = "docs/configuration.md"  # where every key and field is listed (generated from the config-key table)


def yaml_text(value: Any) -> str:
    """`value` on one line as a YAML flow value: strings quoted only where YAML needs it, null, true/false,
    [a, b], {a: 1}. Tuples and sets read as lists (sets sorted), so callers may pass their constants."""

    def plain(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple, KeysView, ValuesView)):
            return [plain(x) for x in v]
        if isinstance(v, Set):
            return sorted(plain(x) for x in v)
        return v if v is None or isinstance(v, (str, bool, int, float)) else str(v)

    text = yaml.safe_dump(plain(value), default_flow_style=True, width=float("inf"), sort_keys=False)
    return text.removesuffix("\n...\n").strip()


_KINDS = {
    str: "a string",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    list: "a list",
    dict: "a mapping",
}


def kind_text(kind: type) -> str:
    """A Python type in YAML's words: int -> "a whole number", bool -> "true or false"."""
    return _KINDS.get(kind, f"a {kind.__name__}")


def did_you_mean(word: str, choices: Iterable[str] | Mapping[str, str]) -> str:
    """` did you mean <closest>?` or nothing; a mapping's keys are compared and its values shown (short
    names compared, full keys shown). Up to three names equally close are offered (us-est-1: us-east-1 or
    us-west-1).
    The standard library's difflib (Ratcliff-Obershelp ratio, cutoff 0.6) catches the usual slips, a swapped,
    missing or extra letter, among 1,437 instance types at most (botocore 1.44.8): no library is needed."""
    shown = choices if isinstance(choices, Mapping) else {c: c for c in choices}
    close = difflib.get_close_matches(word, list(shown), n=3)
    if not close:
        return ""
    ratio = {name: difflib.SequenceMatcher(None, word, name).ratio() for name in close}
    best = sorted(shown[name] for name in close if ratio[name] == ratio[close[0]])
    return f" did you mean {' or '.join(best)}?"


def line(key: str, value: Any, allowed: str, file: str | None = None) -> str:
    """The one line for every bad input: the file (where the caller knows it), the key in full
    (namespace:name, fields after dots), the value as YAML shows it or `(not set)`, what is allowed."""
    # A stack key or field path gets the project's namespace; `aws:region` has its own, a command-line flag
    # (`bench --sweep`) none, and so has a field of a serve config (its file is named instead).
    in_stack = file is None or file.startswith("Pulumi.")
    full_key = f"{PROJECT}:{key}" if in_stack and re.fullmatch(r"[A-Za-z][\w.\[\]-]*", key) else key
    text = yaml_text(value)
    if len(text) > MAX_VALUE:  # a long mapping: its start names it well enough
        text = text[: MAX_VALUE - 3] + "..."
    shown = f"{full_key} (not set)" if value is UNSET else full_key if value is NOT_SHOWN else f"{full_key} = {text}"
    return f"{file + ': ' if file else ''}invalid config {shown}: {allowed}"


class ConfigError(ValueError):
    """A stack config value that cannot work; the message names the key, the value and the rule."""

    def __init__(self, key: str, value: Any, allowed: str, file: str | None = None):
        self.key, self.value, self.allowed, self.file = key, value, allowed, file
        super().__init__(line(key, value, allowed, file))


def refused_when_deploying(errors: list[ConfigError], deploying: bool, planning: str) -> list[str]:
    """What only `pulumi preview`/`up` refuse: the first error raised when deploying; while planning one warning
    each (its key, its value or that it is unset, what is allowed), ending with `planning`: what `make plan`
    does meanwhile."""
    if deploying and errors:
        raise errors[0]
    said = [f"{e.key} is not set yet" if e.value is UNSET else f"{e.key} = {yaml_text(e.value)}" for e in errors]
    return [f"{head}: {error.allowed}; {planning}" for head, error in zip(said, errors, strict=True)]


def in_serve_config(where: str, field: str, value: Any, allowed: str) -> ConfigError:
    """A bad field of a serve config. `where` names the file and maybe a role and path in it
    ("ray_llm_eks/serve_configs/pd-disaggregated.yaml: prefill"); `field` continues that path (".x" or "x")."""
    file, _, inside = where.partition(": ")
    path = inside + field if field.startswith(".") or not inside else f"{inside} {field}"
    return ConfigError(path, value, allowed, file)


def mapping_of(fields: Iterable[str], by: str | None = None) -> str:
    """What a mapping-valued key or field allows, for the line that refuses a value of another kind or shape:
    its fields, or (`by`: what its keys are, e.g. roles) a mapping of those to such fields."""
    shown = f"fields {yaml_text(sorted(fields))}"
    return f"a mapping of {by} to {shown}" if by else f"a mapping with {shown}"


def unknown_field(key: str, name: str, value: Any, fields: Iterable[str]) -> ConfigError:
    """A field of the mapping-valued `key` that it does not have: the closest field, then all of them."""
    fields = sorted(fields)
    return ConfigError(
        f"{key}.{name}", value, f"not a field of {key};{did_you_mean(name, fields)} fields: {yaml_text(fields)}"
    )
