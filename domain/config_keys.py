"""The stack keys the program reads (domain/data/config_keys.yaml), and the refusal of any other key
in the project's namespace: the Pulumi CLI passes undeclared keys through to the program, so a
misspelt key would otherwise change nothing, silently."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from domain import packaged
from domain.errors import PROJECT, ConfigError

KEYS_FILE = Path(__file__).resolve().parent / "data" / "config_keys.yaml"


@functools.cache
def declared() -> dict[str, dict]:
    """Key -> {type, items, secret, description}, as the file lists them."""
    return packaged.load_yaml(KEYS_FILE)


def secret_keys() -> frozenset[str]:
    """Keys whose values are secrets (hfToken, apiKeys, kubeconfig): never handed to domain/."""
    return frozenset(k for k, d in declared().items() if isinstance(d, dict) and d.get("secret"))


def refuse_unknown(full_keys: Iterable[str]) -> None:
    """Raise ConfigError for the first key (`namespace:name`) of our namespace that we do not read."""
    unknown = sorted(k.partition(":")[2] for k in full_keys if k.startswith(f"{PROJECT}:"))
    unknown = [k for k in unknown if k not in declared()]
    if unknown:
        raise ConfigError(unknown[0], "[set]", f"not a key of this project; the keys are in {KEYS_FILE.name}")
