"""`CHECKS`: the function that re-checks each automatic UPGRADING.md entry, by the entry's id. The one registry:
`main` runs the checks from it, and `entry_problems` names an automatic entry missing from it or an id in it
that UPGRADING.md lacks."""

from __future__ import annotations

from collections.abc import Callable

from tools.upstream.checks_aiperf import check_aiperf_config
from tools.upstream.checks_observability import (
    check_exported_metric_names,
    check_prometheus_build,
    check_prometheus_operator_crds,
    check_ray_dashboards,
    check_vllm_ray_metric_names,
)
from tools.upstream.checks_pulumi import (
    check_pulumi_cli_config,
    check_pulumi_policy_servicer,
    check_pulumi_replace_on_changes,
    check_pulumi_runtime_config,
    check_pulumi_sdk_private,
)
from tools.upstream.checks_ray import (
    check_kuberay_cluster_hash,
    check_ray_first_chunk,
    check_ray_kuberay_node_provider,
    check_ray_llm_config,
    check_ray_openai_ingress,
    check_ray_pd_rules,
    check_ray_request_routing,
    check_ray_selective_pd,
    check_ray_serve_vllm_logging,
)
from tools.upstream.checks_vllm import (
    check_vllm_cpu_rehearsal,
    check_vllm_engine_args,
    check_vllm_kv_cache_fit,
    check_vllm_kv_failure_path,
    check_vllm_memory_defaults,
    check_vllm_nixl_behaviour,
    check_vllm_tensor_parallel_heads,
)
from tools.upstream.context import Context
from tools.upstream.known_issue_pins import check_known_issue_pins

CHECKS: dict[str, Callable[[Context], list[str]]] = {
    "ray-dashboards": check_ray_dashboards,
    "vllm-ray-metric-names": check_vllm_ray_metric_names,
    "vllm-kv-failure-path": check_vllm_kv_failure_path,
    "prometheus-build": check_prometheus_build,
    "ray-dashboard-nixl-patch": check_ray_dashboards,
    "ray-dashboard-swapped-patch": check_ray_dashboards,
    "exported-metric-names": check_exported_metric_names,
    "pulumi-cli-config": check_pulumi_cli_config,
    "pulumi-replace-on-changes": check_pulumi_replace_on_changes,
    "kuberay-cluster-hash": check_kuberay_cluster_hash,
    "vllm-engine-args": check_vllm_engine_args,
    "vllm-memory-defaults": check_vllm_memory_defaults,
    "vllm-kv-cache-fit": check_vllm_kv_cache_fit,
    "vllm-tensor-parallel-heads": check_vllm_tensor_parallel_heads,
    "vllm-nixl-behaviour": check_vllm_nixl_behaviour,
    "vllm-cpu-rehearsal": check_vllm_cpu_rehearsal,
    "ray-pd-rules": check_ray_pd_rules,
    "ray-serve-vllm-logging": check_ray_serve_vllm_logging,
    "ray-openai-ingress": check_ray_openai_ingress,
    "ray-selective-pd": check_ray_selective_pd,
    "ray-first-chunk": check_ray_first_chunk,
    "ray-kuberay-node-provider": check_ray_kuberay_node_provider,
    "ray-llm-config": check_ray_llm_config,
    "ray-request-routing": check_ray_request_routing,
    "aiperf-config": check_aiperf_config,
    "pulumi-sdk-private": check_pulumi_sdk_private,
    "pulumi-runtime-config": check_pulumi_runtime_config,
    "pulumi-policy-servicer": check_pulumi_policy_servicer,
    "prometheus-operator-crds": check_prometheus_operator_crds,
    "known-issue-pins": check_known_issue_pins,
}
