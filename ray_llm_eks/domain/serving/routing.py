"""Request routing per role (stack key `routing`): which replica of a role's LLM deployment a request
goes to, rendered into that deployment's Ray Serve `request_router_config`.

Facts this module stands on (Ray 2.58.0; docs/routing-and-benchmarks.md has the reading):
- A deployment's `request_router_config` (ray/serve/config.py RequestRouterConfig) picks the router
  every handle to that deployment builds (ray/serve/_private/router.py AsyncioRouter.request_router):
  the router runs in the CALLER's process. Collocated: OpenAiIngress holds the handle to LLMServer.
  PD: build_pd_openai_app (serving_patterns/prefill_decode/builder.py) binds the prefill deployment,
  built from `prefill_config`, into PDDecodeServer, which calls it through that handle
  (pd_server.py PDOrchestratorMixin._pd_handle_request): prefill's router runs in each decode replica.
- RequestRouterConfig imports the class when it is built (_serialize_request_router_cls), and
  `ray.serve.llm` cannot be imported without vLLM: in the dev venv this module checks the config
  itself (class allow-list, kwargs); the rehearsal venv runs Ray's own check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray_llm_eks.domain.core.errors import (
    NOT_SHOWN,
    ConfigError,
    did_you_mean,
    in_serve_config,
    kind_text,
    mapping_of,
    unknown_field,
    yaml_text,
)
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.serving.fields import drop, ensure, put
from ray_llm_eks.domain.serving.llm_config import LlmConfig

if TYPE_CHECKING:  # serve_app imports this module (its parse checks request routers)
    from ray_llm_eks.domain.serving.serve_app import ServeDocument

KEY = "routing"

# Ray Serve 2.58 ray/serve/_private/constants.py DEFAULT_REQUEST_ROUTER_PATH.
POWER_OF_TWO_CLASS = "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter"
# Ray 2.58 ray/serve/llm/request_router.py (PublicAPI beta): a subclass of the internal class below.
PREFIX_AFFINITY_CLASS = "ray.serve.llm.request_router.PrefixCacheAffinityRouter"
PREFIX_AFFINITY_INTERNAL = (
    "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router:PrefixCacheAffinityRouter"
)

# initialize_state's keyword arguments and defaults, Ray 2.58 prefix_aware_router.py
# PrefixCacheAffinityRouter.initialize_state (tree_actor is for Ray's tests only). A test holds this
# table equal to the installed Ray's signature.
PREFIX_AFFINITY_KWARGS: dict[str, tuple[type, Any]] = {
    "imbalanced_threshold": (float, float("inf")),
    "match_rate_threshold": (float, 0.1),
    "do_eviction": (bool, False),
    "eviction_threshold_chars": (int, 400_000),
    "eviction_target_chars": (int, 360_000),
    "eviction_interval_secs": (int, 10),
}
# Class path (as a config may spell it) -> its initialize_state kwargs. PowerOfTwoChoicesRequestRouter
# takes none (ray/serve/_private/request_router/request_router.py RequestRouter.initialize_state).
ROUTER_KWARGS: dict[str, dict[str, tuple[type, Any]]] = {
    POWER_OF_TWO_CLASS: {},
    "ray.serve._private.request_router.PowerOfTwoChoicesRequestRouter": {},
    PREFIX_AFFINITY_CLASS: PREFIX_AFFINITY_KWARGS,
    "ray.serve.llm.request_router:PrefixCacheAffinityRouter": PREFIX_AFFINITY_KWARGS,
    PREFIX_AFFINITY_INTERNAL: PREFIX_AFFINITY_KWARGS,
    PREFIX_AFFINITY_INTERNAL.replace(":", "."): PREFIX_AFFINITY_KWARGS,
}
# Why each other router Ray 2.58 ships is not offered.
REFUSED_ROUTERS = {
    "KVAwareRouter": (
        "KVAwareRouter scores replicas through the KVTokenTracker that only the direct-streaming LLMRouter "
        "ingress builds (Ray 2.58 core/ingress/router.py, kv_aware_router.py initialize_state); anywhere else, "
        "prefill's handle inside decode replicas included, it degrades to random choice"
    ),
}
# Fields of Ray 2.58 RequestRouterConfig (ray/serve/config.py).
REQUEST_ROUTER_FIELDS = {
    "request_router_class",
    "request_router_kwargs",
    "request_routing_stats_period_s",
    "request_routing_stats_timeout_s",
    "initial_backoff_s",
    "backoff_multiplier",
    "max_backoff_s",
}

POLICIES = ("powerOfTwo", "prefixAffinity")
# Roles whose replicas compute prompts: a prefix cache to route to. Decode reads its prompts' KV
# from prefill over NIXL; affinity there is not rehearsed, so not offered.
ROUTABLE_ROLES = ("collocated", "prefill")
_FIELDS = {"policy", "imbalancedThreshold", "matchRateThreshold", "eviction"}
_EVICTION_FIELDS = {
    "thresholdChars": "eviction_threshold_chars",
    "targetChars": "eviction_target_chars",
    "intervalSeconds": "eviction_interval_secs",
}
SHAPE = mapping_of(_FIELDS, by=f"roles {yaml_text(ROUTABLE_ROLES)}")


@dataclass(frozen=True)
class RoleRouting:
    """One role's router: Serve's default (power of two choices) or prefix-cache affinity."""

    policy: str = "powerOfTwo"
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # initialize_state kwargs, Ray's names

    def request_router_config(self) -> dict | None:
        """The deployment's `request_router_config`, or None for Serve's default router."""
        if self.policy == "powerOfTwo":
            return None
        config: dict = {"request_router_class": PREFIX_AFFINITY_CLASS}
        if self.kwargs:
            config["request_router_kwargs"] = dict(self.kwargs)
        return config


def _number(key: str, value: Any, low: float, high: float | None, whole: bool = False) -> float:
    ok = isinstance(value, int if whole else (int, float)) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        span = f"{low:g} to {high:g}" if high is not None else f"{low:g} or more"
        raise ConfigError(key, value, f"{'a whole number' if whole else 'a number'}, {span}")
    return value


def parse_role(role: str, raw: Any) -> RoleRouting:
    key = f"{KEY}.{role}"
    if not isinstance(raw, Mapping):
        raise ConfigError(key, raw, mapping_of(_FIELDS))
    for name, value in raw.items():
        if name not in _FIELDS:
            raise unknown_field(key, name, value, _FIELDS)
    policy = raw.get("policy", "powerOfTwo")
    if policy not in POLICIES:
        raise ConfigError(f"{key}.policy", policy, f"one of {yaml_text(POLICIES)}")
    tuning = sorted(set(raw) - {"policy"})
    if policy == "powerOfTwo":
        if tuning:
            raise ConfigError(f"{key}.{tuning[0]}", raw[tuning[0]], "set only with policy prefixAffinity")
        return RoleRouting()
    kwargs: dict[str, Any] = {}
    if "imbalancedThreshold" in raw:
        # Queue-length difference above which the router falls back to power of two (Ray: inf, never).
        kwargs["imbalanced_threshold"] = _number(f"{key}.imbalancedThreshold", raw["imbalancedThreshold"], 0, None)
    if "matchRateThreshold" in raw:
        kwargs["match_rate_threshold"] = _number(f"{key}.matchRateThreshold", raw["matchRateThreshold"], 0, 1)
    if "eviction" in raw:
        eviction = raw["eviction"]
        if not isinstance(eviction, Mapping):
            raise ConfigError(f"{key}.eviction", eviction, mapping_of(_EVICTION_FIELDS))
        kwargs["do_eviction"] = True
        for name, value in eviction.items():
            if name not in _EVICTION_FIELDS:
                raise unknown_field(f"{key}.eviction", name, value, _EVICTION_FIELDS)
            kwargs[_EVICTION_FIELDS[name]] = int(_number(f"{key}.eviction.{name}", value, 1, None, whole=True))
        threshold = kwargs.get("eviction_threshold_chars", PREFIX_AFFINITY_KWARGS["eviction_threshold_chars"][1])
        target = kwargs.get("eviction_target_chars", PREFIX_AFFINITY_KWARGS["eviction_target_chars"][1])
        if target > threshold:
            raise ConfigError(
                f"{key}.eviction",
                dict(eviction),
                f"targetChars ({target}) at most thresholdChars ({threshold}): eviction shrinks the prefix tree "
                "from the threshold down to the target",
            )
    return RoleRouting("prefixAffinity", kwargs)


def parse(raw: Any) -> dict[str, RoleRouting]:
    """The stack's `routing` value: {role: {policy, imbalancedThreshold, matchRateThreshold, eviction}}."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(KEY, raw, SHAPE)
    routing = {}
    for role, value in raw.items():
        if role not in ROUTABLE_ROLES:
            raise ConfigError(
                f"{KEY}.{role}",
                value,
                f"a role of {yaml_text(ROUTABLE_ROLES)}, the roles whose replicas compute prompts (decode reads its "
                f"prompts' KV from prefill; routing it by prefix is not rehearsed here), with fields "
                f"{yaml_text(sorted(_FIELDS))}",
            )
        routing[role] = parse_role(role, value)
    return routing


def check_request_router_config(where: str, config: Any) -> None:
    """A `request_router_config` as a serve file (or our renderer) writes it: the checks Ray would make
    only on the cluster, where a wrong kwarg fails the first request inside the caller's replica."""
    if not isinstance(config, Mapping):
        raise in_serve_config(where, "", config, mapping_of(REQUEST_ROUTER_FIELDS))
    unknown = sorted(set(config) - REQUEST_ROUTER_FIELDS)
    if unknown:
        raise in_serve_config(
            where,
            f".{unknown[0]}",
            NOT_SHOWN,
            f"not a field of Ray 2.58 RequestRouterConfig;{did_you_mean(unknown[0], REQUEST_ROUTER_FIELDS)} "
            f"fields: {yaml_text(sorted(REQUEST_ROUTER_FIELDS))}",
        )
    cls = config.get("request_router_class", POWER_OF_TWO_CLASS)
    refused = next(
        (reason for name, reason in REFUSED_ROUTERS.items() if isinstance(cls, str) and cls.endswith(name)), None
    )
    if refused:
        raise in_serve_config(where, ".request_router_class", cls, f"not offered: {refused}")
    if cls not in ROUTER_KWARGS:
        raise in_serve_config(
            where,
            ".request_router_class",
            cls,
            f"one of {yaml_text([POWER_OF_TWO_CLASS, PREFIX_AFFINITY_CLASS])} (stack key `routing` writes it for you)",
        )
    allowed = ROUTER_KWARGS[cls]
    kwargs = config.get("request_router_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise in_serve_config(where, ".request_router_kwargs", kwargs, mapping_of(allowed))
    for name, value in kwargs.items():
        if name not in allowed:
            raise in_serve_config(
                where,
                f".request_router_kwargs.{name}",
                NOT_SHOWN,
                f"not an argument of {cls.rpartition('.')[2].rpartition(':')[2]}.initialize_state;"
                f"{did_you_mean(name, list(allowed))} arguments: {yaml_text(sorted(allowed))}",
            )
        kind = allowed[name][0]
        ok = isinstance(value, kind) if kind is bool else isinstance(value, int if kind is int else (int, float))
        if not ok or (kind is not bool and isinstance(value, bool)):
            raise in_serve_config(where, f".request_router_kwargs.{name}", value, kind_text(kind))
    for name in REQUEST_ROUTER_FIELDS - {"request_router_class", "request_router_kwargs"}:
        value = config.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise in_serve_config(where, f".{name}", value, "a number above 0 (Ray: PositiveFloat)")


# vLLM 0.26 engine/arg_utils.py EngineArgs._set_default_chunked_prefill_and_prefix_caching_args: prefix caching
# is on by default only where the model supports it and is not hybrid ("keep it opt-in for now").
NO_PREFIX_CACHE = (
    "prefix affinity sends a prompt to the replica holding its prefix in vLLM's prefix cache, and vLLM 0.26 "
    "keeps that cache off for hybrid (linear-attention) models unless asked: set engine_kwargs."
    "enable_prefix_caching: true on this role in {file} (its Mamba layers then run vLLM's experimental "
    "'align' cache mode; the fit check counts its second state page), or route this role by powerOfTwo"
)


def prefix_cache_on(config: LlmConfig, hybrid: bool) -> bool:
    """Whether the role's engine keeps a prefix cache (vLLM 0.26's default, or engine_kwargs)."""
    asked = config.engine.enable_prefix_caching
    return bool(asked) if asked is not None else not hybrid


def with_routing(
    doc: ServeDocument,
    routing: Mapping[str, RoleRouting],
    where: str,
    hybrid: Callable[[LlmConfig], bool] = lambda _config: False,
) -> ServeDocument:
    """The document with each routed role's `request_router_config` written into its LLM config (after the
    deployment's other fields); a role the application does not have, or prefix affinity on an engine without a
    prefix cache, is refused. `hybrid(config)`: whether the model a config serves is hybrid (the model table)."""
    configs = doc.roles
    for role, chosen in routing.items():
        if role not in configs:
            raise ConfigError(f"{KEY}.{role}", chosen.policy, f"a role of {where}: {yaml_text(sorted(configs))}")
        config = configs[role]
        if chosen.policy == "prefixAffinity" and not prefix_cache_on(config, hybrid(config)):
            raise ConfigError(f"{KEY}.{role}.policy", chosen.policy, NO_PREFIX_CACHE.format(file=where))

    def routed(role: str, config: LlmConfig) -> LlmConfig:
        if role not in routing:
            return config
        config = ensure(config, "deployment_config")
        deployment = drop(config.deployment, "request_router_config")
        router = routing[role].request_router_config()
        if router is not None:
            deployment = put(deployment, request_router_config=router)
        return put(config, deployment_config=deployment)

    return doc.map_roles(routed)


def load(raw: RawConfig, doc: ServeDocument, serve_file: str, model_facts: Callable[[str, str], Any]) -> ServeDocument:
    """The stack's `routing` section, checked and written into the application's LLM configs (by role).
    `model_facts(model_id, model_source).hybrid` answers from the model table
    (ray_llm_eks/domain/serving/model_table.py)."""

    def hybrid(config: LlmConfig) -> bool:
        return bool(model_facts(*config.model.id_and_source).hybrid)

    where = f"ray_llm_eks/serve_configs/{serve_file}.yaml"
    return with_routing(doc, parse(raw.mapping(KEY, SHAPE)), where, hybrid)


def role_policy(config: Mapping) -> str:
    """The policy an LLM config's deployment routes by, as the stack names it."""
    router = ((config.get("deployment_config") or {}).get("request_router_config") or {}).get("request_router_class")
    return "powerOfTwo" if router in (None, *(c for c, k in ROUTER_KWARGS.items() if not k)) else "prefixAffinity"
