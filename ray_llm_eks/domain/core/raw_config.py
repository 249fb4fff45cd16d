"""The stack's raw values as Pulumi hands them to a program (strings; JSON for arrays and objects), read with
their types: the one reader every config section's `load(raw, ...)` takes, so each section reads its own keys.
An unset key reads as its default from ray_llm_eks/domain/data/config_keys.yaml, or as one the caller computes
where the default depends on other keys."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import UNSET, ConfigError, kind_text, mapping_of, unknown_field

Getter = Callable[[str], "str | None"]


_TABLE = object()  # no default given in code: the config-key table's (or None where it has none)


def _fallback(key: str, computed: Any) -> Any:
    """What an unset key reads as. A constant default is written only in ray_llm_eks/domain/data/config_keys.yaml;
    code gives one only where it is computed (per stack, per region, from other keys)."""
    if computed is not _TABLE:
        if config_keys.has_default(key):
            raise AssertionError(f"{key}: its default is in {config_keys.KEYS_FILE.name}; do not repeat it in code")
        return computed
    return config_keys.default(key) if config_keys.has_default(key) else None


class RawConfig:
    """Raw stack values as Pulumi hands them to a program: strings, JSON for arrays and objects. An
    unset key reads as its default (_fallback)."""

    def __init__(self, get: Getter):
        self._get = get

    def is_set(self, key: str) -> bool:
        return self._get(key) is not None

    def given(self, key: str) -> str | None:
        """The text as the stack sets it, no default (a secret key reads as a marker: set or not)."""
        return self._get(key)

    def text(self, key: str, computed: Any = _TABLE) -> str | None:
        value = self._get(key)
        return _fallback(key, computed) if value is None else value

    def integer(self, key: str, computed: Any = _TABLE) -> int:
        value = self._get(key)
        if value is None:
            return _fallback(key, computed)
        try:
            return int(value)
        except ValueError:
            raise ConfigError(key, value, "a whole number") from None

    def boolean(self, key: str, computed: Any = _TABLE) -> bool:
        value = self._get(key)
        if value is None:
            return _fallback(key, computed)
        if value.lower() not in ("true", "false"):
            raise ConfigError(key, value, "true or false")
        return value.lower() == "true"

    def mapping(self, key: str, shape: str, computed: Any = _TABLE) -> Any:
        """A structured key that holds a mapping; `shape` says what it holds, for the line refusing another kind
        (the section that reads the key owns it)."""
        return self._structured(key, dict, shape, computed)

    def listing(self, key: str, computed: Any = _TABLE) -> Any:
        return self._structured(key, list, "a list", computed)

    def _structured(self, key: str, kind: type, shape: str, computed: Any) -> Any:
        value = self._get(key)
        if value is None:
            return _fallback(key, computed)
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if not isinstance(parsed, kind):
            raise ConfigError(key, parsed, shape)
        return parsed


def check_fields(key: str, raw: Any, allowed: Mapping[str, type], required: tuple[str, ...] = ()) -> dict:
    """Check one structured value: a mapping with only known fields of the right types."""
    if not isinstance(raw, dict):
        raise ConfigError(key, raw, mapping_of(allowed))
    for name, value in raw.items():
        if name not in allowed:
            raise unknown_field(key, name, value, allowed)
        kind = allowed[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{key}.{name}", value, kind_text(kind))
    for name in required:
        if name not in raw:
            raise ConfigError(f"{key}.{name}", UNSET, f"required: {mapping_of(allowed)}")
    return raw
