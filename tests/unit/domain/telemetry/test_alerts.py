"""The alert thresholds and SLO a stack sets (`alerts`, `slo`), and the rules rendered from them. What the rules
do with metrics is promtool's to test (test_promtool.py)."""

from __future__ import annotations

import re

import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.render import alert_rules
from ray_llm_eks.domain.serving import serve_config
from ray_llm_eks.domain.telemetry import alerts, slo
from tests.conftest import ROOT


def settings(name: str = "dev", **values):
    overrides = {f"ray-llm-eks:{k}": v for k, v in values.items()}
    return stack.load_settings(stack.stack_file(name, ROOT, overrides=overrides))


def test_defaults_when_the_stack_sets_nothing():
    s = settings()
    assert s.slo == slo.Slo(ttft_ms=2000, tpot_ms=100)
    assert s.alerts == alerts.AlertThresholds(0.9, 5, 0.97, 10, 15, None)


def test_the_stack_sets_them():
    s = settings(slo={"ttftMs": 800}, alerts={"kvCacheUsage": 0.8, "kvTransferFloorGBps": 2})
    assert s.slo.ttft_ms == 800 and s.slo.tpot_ms == 100
    assert s.alerts.kv_cache_usage == 0.8
    assert alert_rules.rule_inputs(s).kv_floor_bytes_per_s == 2e9


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("slo", {"ttftMs": 0}, "slo.ttftMs = 0: a whole number of milliseconds above 0"),
        ("slo", {"ttft": 500}, "slo.ttft = 500: not a field of slo; did you mean ttftMs? fields: [tpotMs, ttftMs]"),
        ("slo", {"tpotMs": 1.5}, "slo.tpotMs = 1.5: a whole number"),
        ("alerts", {"kvCacheUsage": 1.2}, "alerts.kvCacheUsage = 1.2: a share between 0 and 1"),
        ("alerts", {"waitingMinutes": 2.5}, "alerts.waitingMinutes = 2.5: a whole number of minutes"),
        ("alerts", {"kvTransferFloorGBps": True}, "alerts.kvTransferFloorGBps = true: a number of GB/s"),
        ("alerts", {"floor": 1}, "alerts.floor = 1: not a field of alerts; fields: [gpuMemoryUsage,"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field(key, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        settings(**{key: value})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("parse", [slo.parse, alerts.parse])
def test_a_value_that_is_not_a_mapping_is_refused_naming_the_fields(parse):
    with pytest.raises(ConfigError, match=r" = 500: a mapping with fields \[\w+, \w+"):
        parse(500)


def test_a_gpu_memory_threshold_the_engines_always_exceed_is_refused():
    # vLLM holds gpu_memory_utilization (0.92 by default, vllm 0.26 CacheConfig) of each GPU from the start.
    with pytest.raises(ConfigError, match=r"alerts\.gpuMemoryUsage = 0\.9: above the decode engine's"):
        settings(alerts={"gpuMemoryUsage": 0.9})


def test_the_default_floor_is_a_quarter_of_the_slower_pd_nodes_network():
    # dev: g6.8xlarge on both sides, 25 Gbit/s baseline (Karpenter's generated bandwidth table).
    assert alert_rules.rule_inputs(settings()).kv_floor_bytes_per_s == pytest.approx(25e9 / 8 / 4)


def test_pd_stacks_get_the_kv_transfer_rules_and_collocated_ones_do_not():
    dev = alerts.alert_names(alert_rules.prometheus_rule_spec(settings("dev")))
    baseline = alerts.alert_names(alert_rules.prometheus_rule_spec(settings("baseline")))
    kv = {"NixlTransferFailed", "NixlNotificationFailed", "NixlKvExpired", "KvTransferBelowFloor"}
    assert kv | {"DecodeRecomputingPrompts", "TtftAboveSlo", "RayServiceNotReady"} <= set(dev)
    assert not kv & set(baseline)
    assert "TtftAboveSlo" in baseline


def test_the_rules_name_this_stacks_rayservice_and_thresholds():
    spec = alert_rules.prometheus_rule_spec(settings(slo={"ttftMs": 750}, alerts={"notReadyMinutes": 20}))
    rules = {r.get("alert"): r for g in spec["groups"] for r in g["rules"]}
    assert rules["TtftAboveSlo"]["expr"].endswith("> 0.75")
    ready = rules["RayServiceNotReady"]
    assert 'name="llm", namespace="llm"' in ready["expr"] and ready["for"] == "20m"


def test_a_first_failure_is_caught_although_the_counter_was_absent_before():
    expr = alerts.first_or_more("c_total")
    assert "c_total unless c_total offset 5m" in expr and "increase(c_total[5m])" in expr


# Deployment names as Ray Serve LLM 2.58 names them (PD and collocated apps), and names that run no engine.
DEPLOYMENTS = {
    "Prefill:Qwen--Qwen3_5-9B": "prefill",
    "Decode:Qwen--Qwen3_5-9B": "decode",
    "LLMServer:Qwen--Qwen3_5-9B": "collocated",
    "OpenAiIngress": None,
    "ApiKeyIngress": None,
    "LLMRouter": None,
}


def _promql_role(expr: str, deployment: str) -> str | None:
    """What with_role's label_replace chain gives a series of this deployment (innermost first, the last match
    wins), under the selector that keeps engines only."""
    if re.fullmatch(serve_config.NOT_ENGINES, deployment):
        return None
    role = None
    for label, pattern in re.findall(r'"role", "(\w+)", "deployment", "([^"]+)"', expr):
        if re.fullmatch(pattern, deployment):
            role = label
    return role


def test_one_rule_reads_a_role_from_a_deployment_name_in_python_and_in_promql():
    expr = alerts.with_role("x")
    for deployment, role in {**DEPLOYMENTS, "prefill-and-decode": "decode"}.items():
        assert serve_config.role_of(deployment) == role, deployment
        assert _promql_role(expr, deployment) == role, deployment
