"""The stack keys the program reads (domain/data/config_keys.yaml), and the refusal of any other key
in the project's namespace: the Pulumi CLI passes undeclared keys through to the program, so a
misspelt key would otherwise change nothing, silently."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
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


def secret_keys() -> frozenset[str]:
    """Keys whose values are secrets (hfToken, apiKeys, kubeconfig): never handed to domain/."""
    return frozenset(k for k, d in declared().items() if isinstance(d, dict) and d.get("secret"))


def refuse_unknown(full_keys: Iterable[str]) -> None:
    """Raise ConfigError for the first key (`namespace:name`) of our namespace that we do not read."""
    unknown = sorted(k.partition(":")[2] for k in full_keys if k.startswith(f"{PROJECT}:"))
    unknown = [k for k in unknown if k not in declared()]
    if unknown:
        raise ConfigError(unknown[0], "[set]", f"not a key of this project; the keys are in {KEYS_FILE.name}")
