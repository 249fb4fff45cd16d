"""The PrometheusRule for what breaks a prefill/decode endpoint, rendered per stack from its thresholds
(stack keys `alerts` and `slo`): plain data, no I/O. `prometheus_rule_spec(settings)` is the spec
the graph deploys; `render(inputs)` the same from plain values (promtool's unit tests use it).

Each alert has a runbook section in docs/observability.md (its anchor is the alert name, lower case).
Metric names and why they look as they do: ray_llm_eks/domain/telemetry/ray_metrics.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray_llm_eks.domain.core import config_keys, facts
from ray_llm_eks.domain.core.errors import UNSET, ConfigError, mapping_of
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.serving import serve_config
from ray_llm_eks.domain.serving.fields import given
from ray_llm_eks.domain.serving.fit_prediction import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from ray_llm_eks.domain.telemetry import ray_metrics as m
from ray_llm_eks.domain.telemetry.slo import Slo
from ray_llm_eks.domain.telemetry.slo import default as slo_default

if TYPE_CHECKING:
    from ray_llm_eks.domain.serving.role_view import RoleView

KEY = "alerts"
RUNBOOK = "docs/observability.md"
GROUP_PREFIX = "ray-llm-eks"
# How long a first NIXL failure stays visible after its counter appeared (the counter may never grow again).
KEEP_FIRING = "15m"
# Transfers smaller than this on average say little about the link (their time is mostly fixed cost):
# the throughput floor applies only above it. A Qwen3.5-9B request moves >= 50 MiB (its DeltaNet state).
MIN_MEAN_TRANSFER_BYTES = 16 * 2**20
# Decode engines recompute the last prompt token of every request (vllm/v1/core/sched/scheduler.py
# _update_waiting_for_remote_kv; hybrid models: nixl/base_scheduler.py _get_remote_prefill_token_count);
# more than this share of prompt tokens computed locally on decode means KV did not arrive.
DECODE_RECOMPUTE_SHARE = 0.5

# Recording rules (Prometheus naming: level:metric:operations).
ENGINE_ROLE = "ray_llm_eks:engine_role"  # 1 per vLLM engine (WorkerId) with its Serve deployment and role
TTFT_P95 = "ray_llm_eks:ttft_seconds:p95_5m"
ITL_P95 = "ray_llm_eks:itl_seconds:p95_5m"


@dataclass(frozen=True)
class AlertThresholds:
    """The stack key `alerts`; defaults: the config-key table's (ray_llm_eks/domain/data/config_keys.yaml), read by
    `parse`."""

    kv_cache_usage: float  # share of the KV cache in use (vLLM's kv_cache_usage_perc is 0..1)
    kv_cache_minutes: int
    gpu_memory_usage: float  # share of GPU memory used (vLLM holds gpu_memory_utilization of it)
    waiting_minutes: int  # requests waiting and their number growing for this long
    not_ready_minutes: int  # the RayService not Ready for this long (a fresh start loads weights)
    kv_transfer_floor_gbps: float | None = None  # GB/s per transfer; None: a share of the PD nodes' network
    key_refusals: int = 60  # requests refused for a missing or wrong API key in 5 minutes (the table's default)


# Stack key field -> dataclass field, and what each accepts.
_FIELDS = {
    "kvTransferFloorGBps": ("kv_transfer_floor_gbps", float, "a number of GB/s above 0"),
    "kvCacheUsage": ("kv_cache_usage", float, "a share between 0 and 1"),
    "kvCacheMinutes": ("kv_cache_minutes", int, "a whole number of minutes above 0"),
    "gpuMemoryUsage": ("gpu_memory_usage", float, "a share between 0 and 1"),
    "waitingMinutes": ("waiting_minutes", int, "a whole number of minutes above 0"),
    "notReadyMinutes": ("not_ready_minutes", int, "a whole number of minutes above 0"),
    "keyRefusals": ("key_refusals", int, "a whole number of refused requests above 0"),
}
SHAPE = mapping_of(_FIELDS)
# The floor's default: this share of the slower PD node's network bandwidth. KV moved over TCP instead of
# EFA (NIXL falling back silently) measures far below it.
FLOOR_SHARE_OF_NETWORK = 0.25


def parse(raw: Mapping[str, Any] | None) -> AlertThresholds:
    """The `alerts` value over the table's default (None: the default)."""
    values = {}
    for name, value in config_keys.fields_over_default(KEY, raw, _FIELDS).items():
        attr, kind, allowed = _FIELDS[name]
        ok = not isinstance(value, bool) and isinstance(value, int | float) and value > 0
        if kind is int:
            ok = ok and isinstance(value, int)
        if ok and allowed.startswith("a share"):
            ok = value < 1
        if not ok:
            raise ConfigError(f"{KEY}.{name}", value, allowed)
        values[attr] = kind(value)
    return AlertThresholds(**values)


def default() -> AlertThresholds:
    return parse(None)


def load(
    raw: RawConfig, roles: Mapping[str, RoleView], instance_types: Mapping[str, tuple[str, float]]
) -> AlertThresholds:
    """The stack's `alerts`, checked against the engines it renders (`roles`) and the instance types of
    the pools that run each role (`instance_types`: role -> (type, its baseline network Gbps, 0 unknown))."""
    thresholds = parse(raw.mapping(KEY, SHAPE))
    check_against_engines(
        thresholds,
        {
            role: float(given(view.engine.gpu_memory_utilization, VLLM_DEFAULT_GPU_MEMORY_UTILIZATION))
            for role, view in roles.items()
        },
    )
    if is_pd(roles) and thresholds.kv_transfer_floor_gbps is None:
        kv_floor_bytes_per_s(thresholds, instance_types)  # a PD node whose bandwidth we lack: say so now
    return thresholds


def is_pd(roles: Mapping[str, RoleView]) -> bool:
    return set(facts.PD_ROLES) <= set(roles)


def kv_floor_bytes_per_s(thresholds: AlertThresholds, instance_types: Mapping[str, tuple[str, float]]) -> float:
    """The floor the KV transfer throughput alert uses: the stack's, else FLOOR_SHARE_OF_NETWORK of the slower
    PD node's baseline bandwidth (network_gbps of ray_llm_eks/domain/platform/aws_facts.py or the stack's
    instanceTypes; `instance_types`: role -> (type, Gbps))."""
    if thresholds.kv_transfer_floor_gbps is not None:
        return thresholds.kv_transfer_floor_gbps * 1e9
    pd_types = dict(t for role, t in instance_types.items() if role in facts.PD_ROLES)
    unknown = sorted(t for t, gbps in pd_types.items() if not gbps)
    if unknown or not pd_types:
        raise ConfigError(
            f"{KEY}.kvTransferFloorGBps",
            UNSET,
            f"a number of GB/s: the network bandwidth of {', '.join(unknown) or 'the PD nodes'} is not in "
            "ray_llm_eks/domain/platform/aws_facts.py (nor the stack's instanceTypes networkGbps), so no default "
            "floor can be derived",
        )
    return FLOOR_SHARE_OF_NETWORK * min(pd_types.values()) * 1e9 / 8


def check_against_engines(thresholds: AlertThresholds, gpu_memory_utilization: Mapping[str, float]) -> None:
    """A GPU memory threshold at or below what the engines reserve would fire all the time."""
    for role, share in sorted(gpu_memory_utilization.items()):
        if thresholds.gpu_memory_usage <= share:
            raise ConfigError(
                f"{KEY}.gpuMemoryUsage",
                thresholds.gpu_memory_usage,
                f"above the {role} engine's gpu_memory_utilization {share} (vLLM holds that share of the GPU "
                "from the start: the alert would always fire)",
            )


@dataclass(frozen=True)
class RuleInputs:
    """What the rules depend on, as plain values."""

    pd: bool  # prefill/decode (the NIXL rules) or collocated
    namespace: str  # the RayService's namespace
    service_name: str  # the RayService's name (its pods are <name>-...)
    kv_floor_bytes_per_s: float | None  # PD only
    thresholds: AlertThresholds = field(default_factory=lambda: default())
    slo: Slo = field(default_factory=slo_default)
    local_prefill_below: int | None = None  # selectivePd: decode prefills shorter prompts itself, by design
    keyed: bool = True  # the ingress checks API keys (apiKeyCheck): its refusals are counted


def _minutes(n: int) -> str:
    return f"{n}m"


def _alert(name: str, expr: str, severity: str, summary: str, description: str, for_: str = "0m", **extra) -> dict:
    rule = {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "source": GROUP_PREFIX},
        "annotations": {"summary": summary, "description": description, "runbook": f"{RUNBOOK}#{name.lower()}"},
    }
    rule.update(extra)
    return rule


def first_or_more(counter: str, window: str = "5m") -> str:
    """Series of `counter` that counted in the last `window`, the first count included: a vLLM counter is
    absent until its first increment, so increase() (which needs two samples) never sees that one; a
    series that exists now and did not `window` ago did count. `sum without ()` drops the metric name so
    both halves have the same label sets (`or` then keeps one)."""
    appeared = f"sum without () ({counter} unless {counter} offset {window}) > 0"
    return f"{appeared} or sum without () (increase({counter}[{window}])) > 0"


def counted(counter: str, window: str = "5m") -> str:
    """What `counter` counted in the last `window` per series, a series that appeared within it counted from 0
    (first_or_more says why increase() alone misses it): its value then, else its increase."""
    return (
        f"sum without () ({counter} unless {counter} offset {window}) or sum without () (increase({counter}[{window}]))"
    )


def key_refusal_rules(inputs: RuleInputs) -> list[dict]:
    """A burst of requests refused for their API key (401 from the key-checking ingress, as every Serve proxy
    counts responses by status code)."""
    refused = f'{m.SERVE_HTTP_REQUESTS}{{status_code="401"}}'
    return [
        _alert(
            "ApiKeyRefusalsBurst",
            f"sum by (application) ({counted(refused)}) > {inputs.thresholds.key_refusals}",
            "warning",
            "{{ $value | humanize }} requests to {{ $labels.application }} refused for their API key in 5 minutes",
            "More requests than the stack's alerts.keyRefusals came without one of its API keys: someone guessing "
            "keys, or a client still sending a key rotated out of apiKeys.",
        )
    ]


def _role_join(expr: str) -> str:
    return f"{expr} * on (WorkerId) group_left (role) {ENGINE_ROLE}"


def with_role(expr: str) -> str:
    """`expr` (a vector with the label `deployment`) with a `role` label read from the deployment's name, as
    serve_config.role_of reads it (a later label_replace wins: the PD roles after the collocated default)."""
    expr = f'label_replace({expr}, "role", "{facts.COLLOCATED_ROLE}", "deployment", ".+")'
    for role in facts.PD_ROLES:
        expr = f'label_replace({expr}, "role", "{role}", "deployment", "(?i).*{role}.*")'
    return expr


def recording_rules() -> list[dict]:
    engines = with_role(f'{m.SERVE_REPLICA_QUERIES}{{deployment!~"{serve_config.NOT_ENGINES}"}} * 0 + 1')
    rules = [{"record": ENGINE_ROLE, "expr": f"max by (WorkerId, deployment, role) ({engines})"}]
    for record, histogram in ((TTFT_P95, m.TTFT), (ITL_P95, m.ITL)):
        rate = _role_join(f"sum by (le, model_name, WorkerId) (rate({histogram}_bucket[5m]))")
        rules.append({"record": record, "expr": f"histogram_quantile(0.95, sum by (le, model_name, role) ({rate}))"})
    return rules


def pd_rules(inputs: RuleInputs) -> list[dict]:
    per_engine = "model_name, WorkerId"
    bytes_rate = f"sum by ({per_engine}) (rate({m.NIXL_BYTES}_sum[10m]))"
    time_rate = f"sum by ({per_engine}) (rate({m.NIXL_XFER_TIME}_sum[10m]))"
    count_rate = f"sum by ({per_engine}) (rate({m.NIXL_BYTES}_count[10m]))"
    floor = inputs.kv_floor_bytes_per_s or 0.0
    floor_gbps = floor / 1e9
    local = f'sum by ({per_engine}) (rate({m.PROMPT_TOKENS_BY_SOURCE}{{source="local_compute"}}[10m]))'
    every = f"sum by ({per_engine}) (rate({m.PROMPT_TOKENS_BY_SOURCE}[10m]))"
    if inputs.local_prefill_below is not None:
        # Less the prompt tokens selective PD sent down the local path (the same engine's, by WorkerId; 0 while
        # none went there): those decode computes by design.
        by_design = f'sum by (WorkerId) (rate({m.SELECTIVE_PD_PROMPT_TOKENS}{{path="local"}}[10m]))'
        local = f"({local} - on (WorkerId) group_left () ({by_design} or sum by (WorkerId) ({local}) * 0))"
    return [
        _alert(
            "NixlTransferFailed",
            first_or_more(m.NIXL_FAILED_TRANSFERS),
            "critical",
            "A NIXL KV transfer failed on engine {{ $labels.WorkerId }}",
            "The decode engine could not read a request's KV cache from prefill. On a hybrid model (Qwen3.5, "
            "Qwen3-Next) vLLM 0.26 then decodes from blocks that were never written (HTTP 200, wrong text); "
            "otherwise kv_load_failure_policy fails or recomputes the request.",
            keep_firing_for=KEEP_FIRING,
        ),
        _alert(
            "NixlNotificationFailed",
            first_or_more(m.NIXL_FAILED_NOTIFICATIONS),
            "warning",
            "A NIXL notification failed on engine {{ $labels.WorkerId }}",
            "The decode engine could not tell prefill that a transfer finished: prefill holds those KV blocks "
            "until they expire.",
            keep_firing_for=KEEP_FIRING,
        ),
        _alert(
            "NixlKvExpired",
            first_or_more(m.NIXL_KV_EXPIRED),
            "warning",
            "Prefill engine {{ $labels.WorkerId }} freed KV that decode never read",
            "A request's KV waited on prefill past its lease (VLLM_NIXL_ABORT_REQUEST_TIMEOUT) and was freed: "
            "decode stalled, died, or cannot reach prefill's side channel.",
            keep_firing_for=KEEP_FIRING,
        ),
        _alert(
            "KvTransferBelowFloor",
            f"({bytes_rate} / {time_rate}) < {floor:.6g} "
            f"and ({bytes_rate} / {count_rate}) >= {MIN_MEAN_TRANSFER_BYTES}",
            "warning",
            "KV moves at {{ $value | humanize }}B/s on engine {{ $labels.WorkerId }}, below "
            f"{floor_gbps:.3g} GB/s",
            "NIXL transfers of this engine ran below the stack's floor for 10 minutes: the usual cause is NIXL "
            "running over TCP instead of EFA (backend, EFA device, security group).",
            for_="10m",
        ),
        _alert(
            "DecodeRecomputingPrompts",
            f'({local} / {every}) > {DECODE_RECOMPUTE_SHARE} and on (WorkerId) ({ENGINE_ROLE}{{role="decode"}})',
            "critical",
            "Decode engine {{ $labels.WorkerId }} computes {{ $value | humanizePercentage }} of prompt tokens itself",
            "Prompt tokens on a decode engine should arrive as KV from prefill; computed locally, the KV did not "
            "arrive (a failed load recomputed under kv_load_failure_policy recompute, or requests that bypass "
            "prefill).",
            for_="5m",
        ),
    ]


def serving_rules(inputs: RuleInputs) -> list[dict]:
    t, slo = inputs.thresholds, inputs.slo
    ns, svc = inputs.namespace, inputs.service_name
    pod_filter = f'namespace="{ns}", pod=~"{svc}-.*"'
    starts_new = (
        f"count by (application, deployment) ({m.SERVE_REPLICA_STARTS} unless {m.SERVE_REPLICA_STARTS} offset 15m)"
    )
    running = f"count by (application, deployment) ({m.SERVE_REPLICA_QUERIES})"
    growth = f"({running} - count by (application, deployment) ({m.SERVE_REPLICA_QUERIES} offset 15m))"
    used = f"({m.DCGM_FB_USED} / ({m.DCGM_FB_USED} + {m.DCGM_FB_FREE}))"
    user_roles = 'role=~"decode|collocated"'
    return [
        _alert(
            "TtftAboveSlo",
            f"sum by (model_name) ({TTFT_P95}) > {slo.ttft_seconds:g}",
            "warning",
            "Time to first token p95 {{ $value | humanizeDuration }} is above the SLO " + f"{slo.ttft_ms} ms",
            "p95 of vLLM's time to first token over 5 minutes, summed over the roles a request goes through "
            "(prefill then decode: no metric records the user's whole TTFT under PD), for 10 minutes.",
            for_="10m",
        ),
        _alert(
            "ItlAboveSlo",
            f"max by (model_name, role) ({ITL_P95}{{{user_roles}}}) > {slo.tpot_seconds:g}",
            "warning",
            "Inter-token latency p95 {{ $value | humanizeDuration }} on {{ $labels.role }} is above the SLO "
            + f"{slo.tpot_ms} ms",
            "p95 of the gaps between streamed tokens (vLLM inter_token_latency) over 5 minutes, for 10 minutes.",
            for_="10m",
        ),
        _alert(
            "KvCacheNearlyFull",
            f"max by (model_name, WorkerId) ({m.KV_CACHE_USAGE}) > {t.kv_cache_usage:g}",
            "warning",
            "KV cache of engine {{ $labels.WorkerId }} {{ $value | humanizePercentage }} full",
            "The engine preempts or queues requests when its KV cache is full.",
            for_=_minutes(t.kv_cache_minutes),
        ),
        _alert(
            "RequestsWaitingGrowing",
            f"sum by (model_name, WorkerId) ({m.REQUESTS_WAITING}) > 0 "
            f"and sum by (model_name, WorkerId) (deriv({m.REQUESTS_WAITING}[10m])) > 0",
            "warning",
            "{{ $value }} requests wait on engine {{ $labels.WorkerId }}, and more each minute",
            "Requests arrive faster than the engine admits them.",
            for_=_minutes(t.waiting_minutes),
        ),
        _alert(
            "ServeReplicaRestarted",
            f"{starts_new} > {growth}",
            "warning",
            "Serve started {{ $value }} replica(s) of {{ $labels.deployment }} in 15 minutes beyond its growth",
            "More replicas started than the deployment grew by: replicas died and were replaced (engine crash, "
            "failed health check).",
        ),
        _alert(
            "RayPodRestarted",
            f"sum by (namespace, pod, container) (increase({m.KUBE_POD_RESTARTS}{{{pod_filter}}}[15m])) > 0",
            "warning",
            "Container {{ $labels.container }} of {{ $labels.pod }} restarted",
            "A Ray pod's container restarted (OOM kill, crash, failed probe): its engines started again.",
        ),
        _alert(
            "GpuMemoryNearlyFull",
            f"max by ({', '.join(m.DCGM_NODE_LABELS)}, gpu) ({used}) > {t.gpu_memory_usage:g}",
            "warning",
            "GPU {{ $labels.gpu }} of {{ $labels.Hostname }}{{ $labels.hostname }} has "
            "{{ $value | humanizePercentage }} of its memory in use",
            "Above what the engines reserve (gpu_memory_utilization): something else holds GPU memory.",
            for_="10m",
        ),
        _alert(
            "RayServiceNotReady",
            f'max by (name, namespace) ({m.KUBERAY_SERVICE_READY}{{name="{svc}", namespace="{ns}", '
            'condition="false"}) == 1',
            "critical",
            "RayService {{ $labels.namespace }}/{{ $labels.name }} is not Ready",
            "KubeRay reports the RayService's Ready condition false: the endpoint does not serve.",
            for_=_minutes(t.not_ready_minutes),
        ),
    ]


def render(inputs: RuleInputs) -> dict:
    """The PrometheusRule spec: {"groups": [...]}."""
    groups = [{"name": f"{GROUP_PREFIX}.recording", "rules": recording_rules()}]
    if inputs.pd:
        groups.append({"name": f"{GROUP_PREFIX}.kv-transfer", "rules": pd_rules(inputs)})
    groups.append({"name": f"{GROUP_PREFIX}.serving", "rules": serving_rules(inputs)})
    if inputs.keyed:
        groups.append({"name": f"{GROUP_PREFIX}.api-keys", "rules": key_refusal_rules(inputs)})
    return {"groups": groups}


def alert_names(spec: dict) -> list[str]:
    return [r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r]
