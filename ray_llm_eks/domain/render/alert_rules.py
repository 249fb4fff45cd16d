"""A stack's alert rules: its Settings turned into the inputs of ray_llm_eks/domain/telemetry/alerts.py's rules (PD or
not, the KV-transfer floor from the pools' network, the thresholds and the SLO), and the PrometheusRule spec."""

from __future__ import annotations

from collections.abc import Mapping

from ray_llm_eks.domain.stack.settings import GpuPoolSettings, Settings
from ray_llm_eks.domain.telemetry import alerts


def rule_inputs(settings: Settings) -> alerts.RuleInputs:
    serving = settings.serving
    pd = alerts.is_pd(serving.roles)
    floor = alerts.kv_floor_bytes_per_s(settings.alerts, pool_types(settings.gpu_pools)) if pd else None
    return alerts.RuleInputs(
        pd=pd,
        namespace=serving.namespace,
        service_name=serving.service_name,
        kv_floor_bytes_per_s=floor,
        thresholds=settings.alerts,
        slo=settings.slo,
        local_prefill_below=serving.serve_document.local_prefill_below if pd else None,
        keyed=settings.hardening.api_key_check,
    )


def pool_types(pools: Mapping[str, GpuPoolSettings]) -> dict[str, tuple[str, float]]:
    """role -> (instance type, its baseline Gbps) of a pool running it (the slowest network when several do)."""
    types: dict[str, tuple[str, float]] = {}
    for pool in pools.values():
        current = types.get(pool.app_role)
        if current is None or pool.spec.network_gbps < current[1]:
            types[pool.app_role] = (pool.nodes.instance_type, pool.spec.network_gbps)
    return types


def prometheus_rule_spec(settings: Settings) -> dict:
    """The spec of the stack's PrometheusRule (obsgraph wraps it in the object)."""
    return alerts.render(rule_inputs(settings))
