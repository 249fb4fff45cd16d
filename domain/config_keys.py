"""The stack keys the program reads (domain/data/config_keys.yaml), and the refusal of any other key
in the project's namespace: the Pulumi CLI passes undeclared keys through to the program, so a
misspelt key would otherwise change nothing, silently."""

from __future__ import annotations

import copy
import functools
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from domain import packaged
from domain.errors import PROJECT, ConfigError

KEYS_FILE = Path(__file__).resolve().parent / "data" / "config_keys.yaml"


@functools.cache
def declared() -> dict[str, dict]:
    """Key -> {type, items, secret, default, default_text, description}, as the file lists them."""
    return packaged.load_yaml(KEYS_FILE)


def has_default(key: str) -> bool:
    return "default" in declared()[key]


def default(key: str) -> Any:
    """The value the program uses when a stack leaves `key` out: the table's, the only place it is
    written (a copy, so no caller can change the table)."""
    entry = declared()[key]
    if "default" not in entry:
        raise KeyError(f"{key} has no default in {KEYS_FILE.name} (its default_text says how it is computed)")
    return copy.deepcopy(entry["default"])


def fields_over_default(key: str, raw: Any, fields: Collection[str]) -> dict[str, Any]:
    """A mapping key's fields: the stack's value (None: not set) over the table's default. ConfigError, one
    line, for a value that is not a mapping or a field not in `fields`; the caller checks each value."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(key, raw, f"a mapping with fields from {sorted(fields)}")
    merged = {**default(key), **(raw or {})}
    for name, value in merged.items():
        if name not in fields:
            raise ConfigError(f"{key}.{name}", value, f"unknown field; fields: {sorted(fields)}")
    return merged


def secret_keys() -> frozenset[str]:
    """Keys whose values are secrets (hfToken, apiKeys, kubeconfig): never handed to domain/."""
    return frozenset(k for k, d in declared().items() if isinstance(d, dict) and d.get("secret"))


def refuse_unknown(full_keys: Iterable[str]) -> None:
    """Raise ConfigError for the first key (`namespace:name`) of our namespace that we do not read."""
    unknown = sorted(k.partition(":")[2] for k in full_keys if k.startswith(f"{PROJECT}:"))
    unknown = [k for k in unknown if k not in declared()]
    if unknown:
        raise ConfigError(unknown[0], "[set]", f"not a key of this project; the keys are in {KEYS_FILE.name}")
