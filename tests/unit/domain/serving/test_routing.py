"""Routing per role (stack key `routing`, ray_llm_eks/domain/serving/routing.py): parsed, checked like every key,
rendered into the role's `request_router_config`; the allow-list held equal to the pinned Ray's router."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from ray_llm_eks.adapters.stack import load_settings, stack_file
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.serving import routing, serve_config
from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import COLLOCATED_IMPORT, ServeDocument, parse_document
from tests.conftest import ROOT

NS = "ray-llm-eks:"


def roles_of(stack: str, overrides: dict | None = None) -> dict[str, dict]:
    settings = load_settings(stack_file(stack, ROOT, overrides=overrides))
    return {role: to_dict(config) for role, config in settings.serving.serve_document.roles.items()}


def router(config: dict) -> dict | None:
    return config.get("deployment_config", {}).get("request_router_config")


def one_config(config: dict) -> ServeDocument:
    """A collocated document of one LLM config."""
    return parse_document(
        {"applications": [{"import_path": COLLOCATED_IMPORT, "args": {"llm_configs": [config]}}]}, "f"
    )


def routed(doc: ServeDocument) -> dict:
    return to_dict(doc.roles["collocated"])


def test_xpyd_routes_prefill_by_prefix_and_leaves_decode_to_serve():
    configs = roles_of("xpyd")
    assert router(configs["prefill"]) == {
        "request_router_class": "ray.serve.llm.request_router.PrefixCacheAffinityRouter",
        "request_router_kwargs": {"imbalanced_threshold": 4},
    }
    assert router(configs["decode"]) is None
    assert routing.role_policy(configs["prefill"]) == "prefixAffinity"
    assert routing.role_policy(configs["decode"]) == "powerOfTwo"


def test_dp_routes_its_collocated_replicas_by_prefix():
    (config,) = roles_of("dp").values()
    assert router(config)["request_router_class"] == routing.PREFIX_AFFINITY_CLASS
    assert router(config)["request_router_kwargs"] == {"imbalanced_threshold": 16}


def test_stacks_without_routing_keep_serves_default():
    for stack in ("dev", "baseline"):
        assert all(router(c) is None for c in roles_of(stack).values()), stack


def test_every_field_reaches_rays_names():
    raw = {
        "policy": "prefixAffinity",
        "imbalancedThreshold": 2,
        "matchRateThreshold": 0.25,
        "eviction": {"thresholdChars": 1000, "targetChars": 800, "intervalSeconds": 5},
    }
    config = routing.parse_role("prefill", raw).request_router_config()
    assert config["request_router_kwargs"] == {
        "imbalanced_threshold": 2,
        "match_rate_threshold": 0.25,
        "do_eviction": True,
        "eviction_threshold_chars": 1000,
        "eviction_target_chars": 800,
        "eviction_interval_secs": 5,
    }
    routing.check_request_router_config("rendered", config)  # our own output passes our own check
    assert routing.parse_role("prefill", {"policy": "powerOfTwo"}).request_router_config() is None


def test_the_stack_replaces_a_serve_files_router():
    file_router = {"request_router_class": routing.PREFIX_AFFINITY_CLASS}
    doc = one_config({"deployment_config": {"request_router_config": file_router, "num_replicas": 2}})
    chosen = routing.parse({"collocated": {"policy": "powerOfTwo"}})
    assert routed(routing.with_routing(doc, chosen, "f"))["deployment_config"] == {"num_replicas": 2}
    chosen = routing.parse({"collocated": {"policy": "prefixAffinity"}})
    again = routed(routing.with_routing(doc, chosen, "f"))["deployment_config"]
    assert list(again) == ["num_replicas", "request_router_config"]  # the stack's router after the file's fields


INVALID = {
    "decode is not routed": ({"decode": {"policy": "prefixAffinity"}}, "routing.decode", "not rehearsed"),
    "unknown role": ({"prefil": {"policy": "prefixAffinity"}}, "routing.prefil", "a role of"),
    "unknown policy": ({"prefill": {"policy": "kvAware"}}, "routing.prefill.policy", "one of"),
    "unknown field": (
        {"prefill": {"policy": "prefixAffinity", "threshold": 2}},
        "routing.prefill.threshold",
        "not a field of routing.prefill; did you mean matchRateThreshold?",
    ),
    "tuning the default router": (
        {"prefill": {"policy": "powerOfTwo", "matchRateThreshold": 0.5}},
        "routing.prefill.matchRateThreshold",
        "only with policy prefixAffinity",
    ),
    "match rate above 1": (
        {"prefill": {"policy": "prefixAffinity", "matchRateThreshold": 1.5}},
        "routing.prefill.matchRateThreshold",
        "0 to 1",
    ),
    "negative imbalance": (
        {"prefill": {"policy": "prefixAffinity", "imbalancedThreshold": -1}},
        "routing.prefill.imbalancedThreshold",
        "0 or more",
    ),
    "boolean threshold": (
        {"prefill": {"policy": "prefixAffinity", "imbalancedThreshold": True}},
        "routing.prefill.imbalancedThreshold",
        "a number",
    ),
    "eviction target above threshold": (
        {"prefill": {"policy": "prefixAffinity", "eviction": {"thresholdChars": 10, "targetChars": 20}}},
        "routing.prefill.eviction",
        "at most thresholdChars",
    ),
    "fractional eviction interval": (
        {"prefill": {"policy": "prefixAffinity", "eviction": {"intervalSeconds": 0.5}}},
        "routing.prefill.eviction.intervalSeconds",
        "a whole number",
    ),
    "not a mapping": ([{"prefill": "prefixAffinity"}], "routing", "a mapping"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_routing_is_one_line_naming_the_key(case):
    raw, key, rule = INVALID[case]
    with pytest.raises(ConfigError) as caught:
        routing.parse(raw)
    message = str(caught.value)
    assert f"{NS}{key} =" in message and rule in message and "\n" not in message, message


def test_a_role_the_app_does_not_have_is_refused_through_the_stack():
    with pytest.raises(
        ConfigError, match=r"routing\.prefill = prefixAffinity: a role of ray_llm_eks/serve_configs/data-parallel"
    ):
        roles_of("dp", {NS + "routing": json.dumps({"prefill": {"policy": "prefixAffinity"}})})


SERVE_FILE_INVALID = {
    "unknown class": ({"request_router_class": "my.Router"}, "one of"),
    "kv-aware": ({"request_router_class": "ray.serve.llm.request_router.KVAwareRouter"}, "KVTokenTracker"),
    "kwarg typo": (
        {"request_router_class": routing.PREFIX_AFFINITY_CLASS, "request_router_kwargs": {"imbalance_threshold": 2}},
        "initialize_state; did you mean imbalanced_threshold?",
    ),
    "kwarg of the wrong type": (
        {"request_router_class": routing.PREFIX_AFFINITY_CLASS, "request_router_kwargs": {"do_eviction": "yes"}},
        "true or false",
    ),
    "kwargs to the default router": ({"request_router_kwargs": {"match_rate_threshold": 0.2}}, "initialize_state"),
    "unknown field": ({"request_router": routing.PREFIX_AFFINITY_CLASS}, "RequestRouterConfig"),
    "zero stats period": ({"request_routing_stats_period_s": 0}, "above 0"),
}


@pytest.mark.parametrize("case", sorted(SERVE_FILE_INVALID))
def test_a_serve_files_router_config_is_checked_here_not_on_the_cluster(case):
    router_config, rule = SERVE_FILE_INVALID[case]
    doc = serve_config.load_serve_file("data-parallel")
    doc["applications"][0]["args"]["llm_configs"][0]["deployment_config"]["request_router_config"] = router_config
    with pytest.raises(ConfigError, match=rule) as caught:
        parse_document(doc, "data-parallel")
    assert "request_router_config" in str(caught.value)


def test_a_deployments_override_is_checked_too():
    doc = serve_config.load_serve_file("data-parallel")
    doc["applications"][0]["deployments"] = [
        {"name": "LLMServer", "request_router_config": {"request_router_class": "x"}}
    ]
    with pytest.raises(ConfigError, match=r"deployments\[LLMServer\]"):
        parse_document(doc, "data-parallel")


# ---- the allow-list is Ray 2.58's own


def test_prefix_affinity_kwargs_are_the_pinned_rays():
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter

    params = inspect.signature(PrefixCacheAffinityRouter.initialize_state).parameters
    ray_kwargs = {name: p.default for name, p in params.items() if name not in ("self", "tree_actor")}
    assert ray_kwargs == {name: default for name, (_, default) in routing.PREFIX_AFFINITY_KWARGS.items()}


def test_the_public_class_is_the_internal_one():
    """ray.serve.llm.request_router cannot be imported without vLLM: read its source instead."""
    import ray

    source = Path(ray.__file__).parent / "serve" / "llm" / "request_router.py"
    tree = ast.parse(source.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PrefixCacheAffinityRouter"]
    (base,) = cls.bases
    imported = {
        alias.asname or alias.name: f"{node.module}:{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported[base.id] == routing.PREFIX_AFFINITY_INTERNAL
    assert routing.PREFIX_AFFINITY_CLASS == "ray.serve.llm.request_router.PrefixCacheAffinityRouter"


def test_default_router_and_fields_are_the_pinned_rays():
    from ray.serve._private.constants import DEFAULT_REQUEST_ROUTER_PATH
    from ray.serve.config import RequestRouterConfig

    assert routing.POWER_OF_TWO_CLASS == DEFAULT_REQUEST_ROUTER_PATH
    assert set(RequestRouterConfig.model_fields) == routing.REQUEST_ROUTER_FIELDS


def test_rays_request_router_config_takes_what_we_render():
    from ray.serve.config import RequestRouterConfig

    config = routing.parse_role(
        "prefill", {"policy": "prefixAffinity", "imbalancedThreshold": 4}
    ).request_router_config()
    config["request_router_class"] = routing.PREFIX_AFFINITY_INTERNAL  # importable without vLLM
    built = RequestRouterConfig(**config)
    cls = built.get_request_router_class()
    assert cls.__name__ == "PrefixCacheAffinityRouter"
    inspect.signature(cls.initialize_state).bind(None, **built.request_router_kwargs)


def test_prefix_affinity_needs_the_prefix_cache_vllm_keeps_off_for_hybrid_models():
    """dev serves Qwen3.5-9B (hybrid) from pd-disaggregated.yaml, which leaves enable_prefix_caching unset."""
    with pytest.raises(ConfigError, match=r"routing\.prefill\.policy = prefixAffinity.*enable_prefix_caching: true"):
        roles_of("dev", {NS + "routing": json.dumps({"prefill": {"policy": "prefixAffinity"}})})
    assert roles_of("dev", {NS + "routing": json.dumps({"prefill": {"policy": "powerOfTwo"}})})
    affinity = {"collocated": routing.RoleRouting("prefixAffinity")}
    plain = routing.with_routing(one_config({"engine_kwargs": {}}), affinity, "f", hybrid=lambda _c: False)
    assert router(routed(plain))["request_router_class"] == routing.PREFIX_AFFINITY_CLASS  # dense: cached by default
    with pytest.raises(ConfigError, match="enable_prefix_caching"):
        routing.with_routing(one_config({"engine_kwargs": {"enable_prefix_caching": False}}), affinity, "f")
    asked = one_config({"engine_kwargs": {"enable_prefix_caching": True}})
    assert router(routed(routing.with_routing(asked, affinity, "f", hybrid=lambda _c: True))) is not None


def test_the_routed_stacks_turn_the_prefix_cache_on():
    assert roles_of("dp")["collocated"]["engine_kwargs"]["enable_prefix_caching"] is True
    xpyd = roles_of("xpyd")
    assert xpyd["prefill"]["engine_kwargs"]["enable_prefix_caching"] is True
    assert "enable_prefix_caching" not in xpyd["decode"]["engine_kwargs"]
