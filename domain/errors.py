"""The one error type for a bad stack value (shared by config and the serve-config renderer)."""

from __future__ import annotations

from typing import Any

from domain.facts import PROJECT


class ConfigError(ValueError):
    """A stack config value that cannot work; the message names the key, the value and the rule."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        full_key = key if ":" in key else f"{PROJECT}:{key}"
        super().__init__(f"invalid config {full_key} = {value!r}: {allowed}")
