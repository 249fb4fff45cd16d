"""The stack keys the program reads (ray_llm_eks/domain/data/config_keys.yaml), and the refusal of any other key
in the project's namespace: the Pulumi CLI passes undeclared keys through to the program, so a
misspelt key would otherwise change nothing, silently. Keys of the `aws` namespace are checked against
the provider's own list (ray_llm_eks/domain/data/provider_config_keys.yaml): `aws:regoin` is named as written."""

from __future__ import annotations

import copy
import functools
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ray_llm_eks.domain.core import packaged
from ray_llm_eks.domain.core.errors import (
    DOCS,
    NOT_SHOWN,
    PROJECT,
    ConfigError,
    did_you_mean,
    mapping_of,
    unknown_field,
)

KEYS_FILE = packaged.DATA / "config_keys.yaml"
PROVIDER_KEYS_FILE = KEYS_FILE.with_name("provider_config_keys.yaml")
REGION = "aws:region"  # the one provider key the program reads


@functools.cache
def provider_keys() -> dict[str, dict]:
    """Namespace -> {version, keys}: the config keys a provider declares (only `aws` is listed)."""
    return packaged.load_yaml(PROVIDER_KEYS_FILE)


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
        raise ConfigError(key, raw, mapping_of(fields))
    merged = {**default(key), **(raw or {})}
    for name, value in merged.items():
        if name not in fields:
            raise unknown_field(key, name, value, fields)
    return merged


def secret_keys() -> frozenset[str]:
    """Keys whose values are secrets (hfToken, apiKeys, kubeconfig): never handed to ray_llm_eks/domain/."""
    return frozenset(k for k, d in declared().items() if isinstance(d, dict) and d.get("secret"))


def _known() -> dict[str, str]:
    """Short name -> full key of every key a stack may set in our namespace and the providers' we list
    (ours first where a name is in both), for "did you mean"."""
    names = {k: f"{namespace}:{k}" for namespace, entry in provider_keys().items() for k in entry["keys"]}
    return {**names, **{k: f"{PROJECT}:{k}" for k in declared()}}


def check_known(full_key: str, file: str | None = None) -> None:
    """ConfigError for a key (`namespace:name`) of our namespace that we do not read, or of a provider
    namespace we list that the provider does not have. Other namespaces (pulumi, kubernetes, eks) pass: their
    keys are the engine's or a provider's we hold no list of."""
    namespace, _, name = full_key.partition(":")
    if namespace == PROJECT:
        if name not in declared():
            owner = "this project"
        else:
            return
    elif namespace in provider_keys():
        entry = provider_keys()[namespace]
        if name in entry["keys"]:
            return
        # Refused, not warned about: the provider's default provider refuses it at `pulumi up` anyway
        # (pulumi-terraform-bridge pkg/tfbridge Provider.CheckConfig: "is not a valid configuration key").
        owner = f"the {namespace} provider (pulumi-{namespace} {entry['version']}; this program reads {REGION})"
    else:
        return
    hint = did_you_mean(name, _known())
    raise ConfigError(full_key, NOT_SHOWN, f"not a key of {owner};{hint} keys: {DOCS}", file)


def refuse_unknown(full_keys: Iterable[str], file: str | None = None) -> None:
    """check_known for each `namespace:name` key, in the order given."""
    for full_key in full_keys:
        check_known(full_key, file)
