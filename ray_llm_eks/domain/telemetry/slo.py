"""The endpoint's service-level objectives (stack key `slo`): read once, used by the TTFT/ITL alerts
(ray_llm_eks/domain/telemetry/alerts.py) and by the benchmark's goodput."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import ConfigError, mapping_of
from ray_llm_eks.domain.core.raw_config import RawConfig

KEY = "slo"


@dataclass(frozen=True)
class Slo:
    """Defaults: the config-key table's (ray_llm_eks/domain/data/config_keys.yaml), read by `parse`."""

    # Time to first token as the user sees it, p95. For PD the prefill and decode engines each record
    # their part (no metric holds the sum): the alert adds their p95s.
    ttft_ms: int
    # Time per output token after the first, p95 (the alert reads vLLM's inter-token latency).
    tpot_ms: int

    @property
    def ttft_seconds(self) -> float:
        return self.ttft_ms / 1000

    @property
    def tpot_seconds(self) -> float:
        return self.tpot_ms / 1000


_FIELDS = {"ttftMs": "ttft_ms", "tpotMs": "tpot_ms"}
SHAPE = mapping_of(_FIELDS)


def parse(raw: Mapping[str, Any] | None) -> Slo:
    """The `slo` value over the table's default (None: the default); ConfigError naming the field otherwise."""
    values = {}
    for name, value in config_keys.fields_over_default(KEY, raw, _FIELDS).items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{KEY}.{name}", value, "a whole number of milliseconds above 0")
        values[_FIELDS[name]] = value
    return Slo(**values)


def load(raw: RawConfig) -> Slo:
    """The stack's `slo` section."""
    return parse(raw.mapping(KEY, SHAPE))


def default() -> Slo:
    return parse(None)
