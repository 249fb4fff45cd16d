"""Names of the metrics the alerts, our dashboard and `make verify` read, as Prometheus sees them.

vLLM 0.26 names its metrics `vllm:<name>`; under Ray Serve LLM they go through Ray's metrics
(vllm/v1/metrics/ray_wrappers.py: every character outside [a-zA-Z0-9_] becomes `_`), Ray prefixes
`ray_`, and Ray's Prometheus export adds `_total` to counters. Histograms come as `_bucket`, `_sum`,
`_count`. Labels: vLLM's `model_name` and `engine`, the wrapper's `ReplicaId`, Ray's `WorkerId`,
`SessionName`, `NodeAddress`; the role (prefill, decode) only through Serve's own metrics, which carry
`deployment` (the recording rule ENGINE_ROLE in ray_llm_eks/domain/telemetry/alerts.py joins them on WorkerId; a
replica's engine metrics come from the replica's own process).

A vLLM counter appears at its first increment only (RayCounterWrapper.inc returns on 0): a failure
counter is absent, not 0, until the first failure.
"""

from __future__ import annotations

# vLLM 0.26, vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py NixlPromMetrics. Transfers are
# recorded where the KV is read (the decode engine, pull mode); expired KV where it waited (prefill).
NIXL_BYTES = "ray_vllm_nixl_bytes_transferred"  # histogram, bytes per transfer
NIXL_XFER_TIME = "ray_vllm_nixl_xfer_time_seconds"  # histogram, seconds per transfer
NIXL_FAILED_TRANSFERS = "ray_vllm_nixl_num_failed_transfers_total"
NIXL_FAILED_NOTIFICATIONS = "ray_vllm_nixl_num_failed_notifications_total"
NIXL_KV_EXPIRED = "ray_vllm_nixl_num_kv_expired_reqs_total"
NIXL_FAILURE_COUNTERS = (NIXL_FAILED_TRANSFERS, NIXL_FAILED_NOTIFICATIONS, NIXL_KV_EXPIRED)

# vLLM 0.26, vllm/v1/metrics/loggers.py PrometheusStatLogger.
PROMPT_TOKENS = "ray_vllm_prompt_tokens_total"
# label `source`: local_compute, local_cache_hit, external_kv_transfer (vllm/v1/metrics/stats.py PromptTokenStats)
PROMPT_TOKENS_BY_SOURCE = "ray_vllm_prompt_tokens_by_source_total"
# Prompt tokens looked up in, and found in, the engine's prefix cache (counters; label ReplicaId: the Serve
# replica, vllm/v1/metrics/ray_wrappers.py). Exported only where the engine keeps a prefix cache.
PREFIX_CACHE_QUERIES = "ray_vllm_prefix_cache_queries_total"
PREFIX_CACHE_HITS = "ray_vllm_prefix_cache_hits_total"
GENERATION_TOKENS = "ray_vllm_generation_tokens_total"
REQUEST_SUCCESS = "ray_vllm_request_success_total"
TTFT = "ray_vllm_time_to_first_token_seconds"  # histogram
ITL = "ray_vllm_inter_token_latency_seconds"  # histogram
E2E_LATENCY = "ray_vllm_e2e_request_latency_seconds"  # histogram
REQUESTS_WAITING = "ray_vllm_num_requests_waiting"  # gauge
REQUESTS_RUNNING = "ray_vllm_num_requests_running"  # gauge
KV_CACHE_USAGE = "ray_vllm_kv_cache_usage_perc"  # gauge, a fraction (1 = full)

# Ray Serve 2.58 (ray/serve/_private/replica.py, deployment_state.py).
SERVE_REQUESTS = "ray_serve_deployment_request_counter_total"  # labels deployment, replica, application, route
SERVE_REPLICA_STARTS = "ray_serve_deployment_replica_starts_total"  # one series per replica, 1 at its start
# A gauge every live replica exports from its start (labels deployment, replica, application, WorkerId): what
# replicas run, and which deployment (so role) an engine's WorkerId belongs to. Serve's controller gauge
# serve_deployment_replica_healthy was absent from a healthy 2.58 rehearsal's scrape.
SERVE_REPLICA_QUERIES = "ray_serve_replica_processing_queries"
# Every Serve proxy's HTTP responses, label `status_code` (serve/_private/request_ingress_metrics.py
# RequestIngressMetrics: f"serve_num_{protocol}_requests", so no literal of this name upstream).
SERVE_HTTP_REQUESTS = "ray_serve_num_http_requests_total"
# How much later than asked each event loop of a Serve replica or proxy woke, in ms (serve/_private/
# event_loop_monitoring.py EventLoopMonitor, a histogram with buckets 1, 5, 10, 25, 50 ms ...; one sample per
# RAY_SERVE_EVENT_LOOP_MONITORING_INTERVAL_S, 5 s by default). Labels `component` (replica, proxy), `loop_type`
# (main; user_code, the loop the deployment's own code runs on, with RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD's
# default; router, a handle's), and `deployment` on a replica's main and user-code loops.
SERVE_LOOP_LAG = "ray_serve_event_loop_scheduling_latency_ms"

# Ours: the decode replicas' count of requests by selective PD's path (ray_llm_eks/serve_ingress/selective_pd.py
# REQUESTS_METRIC, a ray.serve.metrics.Counter), label `path`: local (prefilled on decode) or split.
SELECTIVE_PD_REQUESTS = "ray_selective_pd_requests_total"
SELECTIVE_PD_PROMPT_TOKENS = "ray_selective_pd_prompt_tokens_total"  # PROMPT_TOKENS_METRIC there, same label

# KubeRay 1.7.0 operator (ray-operator/controllers/ray/metrics/ray_service_metrics.go): value 1, the
# state in label `condition` ("true"/"false"), labels name, namespace, uid.
KUBERAY_SERVICE_READY = "kuberay_service_condition_ready"
# kube-state-metrics (in kube-prometheus-stack).
KUBE_POD_RESTARTS = "kube_pod_container_status_restarts_total"

# NVIDIA dcgm-exporter default counters (etc/default-counters.csv): utilisation in %, memory in MiB.
# Its node label is `Hostname` up to 4.5.3-4.8.2 and `hostname` after (dcgm-exporter #655): queries
# group by both, so either works.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_NODE_LABELS = ("Hostname", "hostname")

# What a healthy PD run must export (the rehearsal checks its scrape against this list).
PD_REQUIRED = (
    f"{NIXL_BYTES}_sum",
    f"{NIXL_XFER_TIME}_sum",
    PROMPT_TOKENS_BY_SOURCE,
    GENERATION_TOKENS,
    f"{TTFT}_bucket",
    f"{ITL}_bucket",
    KV_CACHE_USAGE,
    REQUESTS_WAITING,
    SERVE_REQUESTS,
    SERVE_REPLICA_STARTS,
    SERVE_REPLICA_QUERIES,
)

# The upstream names behind them: vLLM's `vllm:<name>` and Ray Serve's metric names (`make check-upstream`,
# tools/upstream/checks_observability.py, finds each in the pinned sources).
_VLLM = (NIXL_BYTES, NIXL_XFER_TIME, *NIXL_FAILURE_COUNTERS, PROMPT_TOKENS, PROMPT_TOKENS_BY_SOURCE, GENERATION_TOKENS,
         REQUEST_SUCCESS, TTFT, ITL, E2E_LATENCY, REQUESTS_WAITING, REQUESTS_RUNNING, KV_CACHE_USAGE,
         PREFIX_CACHE_QUERIES, PREFIX_CACHE_HITS)  # fmt: skip
VLLM_NAMES = tuple(n.removeprefix("ray_vllm_").removesuffix("_total") for n in _VLLM)
SERVE_NAMES = tuple(
    n.removeprefix("ray_").removesuffix("_total") for n in (SERVE_REQUESTS, SERVE_REPLICA_STARTS, SERVE_REPLICA_QUERIES)
)
