"""Observability's settings and names, as plain data: the `observability` stack setting with its checks, the
names of the monitoring release's objects other parts of the graph point at (NetworkPolicies, the Ray head's
dashboard, Pod Security), and what the Ray head is told about Grafana and Prometheus. The release itself (its
pods' requests, the charts' values, the operator's objects, the storage) is
ray_llm_eks/domain/telemetry/monitoring_release.py's.

Modes (`observability.mode`):
  embedded  kube-prometheus-stack on the system node (Prometheus with an EBS volume, Grafana with its
            dashboard sidecar, Alertmanager), default on a cluster this stack creates;
  amp       Amazon Managed Service for Prometheus: the workspace in the graph, an in-cluster
            Prometheus in agent mode remote-writes to it (SigV4, IAM through EKS Pod Identity), the
            alert rules live in the workspace;
  external  the cluster runs a Prometheus Operator already (existing-cluster mode): only our
            PodMonitors, rule and dashboards, labelled for its `release`;
  none      nothing (default on an existing cluster).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_llm_eks.domain.core.errors import ConfigError, kind_text, mapping_of, unknown_field
from ray_llm_eks.domain.core.facts import HEAD_METRICS_PORTS
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.platform.field_checks import chart_pin, check_label_value, check_one_of
from ray_llm_eks.domain.platform.versions import DCGM_EXPORTER_CHART, KUBE_PROMETHEUS_STACK_CHART

if TYPE_CHECKING:
    from ray_llm_eks.domain.platform.versions import ChartPin

MODES = ("embedded", "amp", "external", "none")
IN_CLUSTER_STACK = ("embedded", "amp")  # modes that install kube-prometheus-stack themselves
NAMESPACE = "monitoring"  # where the chart runs (embedded, amp)
# The Helm release. kube-prometheus-stack names its objects after the release when the release name
# contains the chart's name (templates/_helpers.tpl kube-prometheus-stack.fullname), and so does its
# Grafana subchart (grafana 12.11.1 templates/_helpers.tpl grafana.fullname): fixed names below.
RELEASE = "kube-prometheus-stack"
# The chart's Prometheus selects PodMonitors, ServiceMonitors and PrometheusRules carrying this label
# when its selectors are left empty (templates/prometheus/prometheus.yaml, *SelectorNilUsesHelmValues),
# in every namespace (its *NamespaceSelector defaults to {}).
RELEASE_LABEL = "release"
PROMETHEUS_NAME = f"{RELEASE}-prometheus"  # the Prometheus object, its Service and service account
PROMETHEUS_PORT = 9090
GRAFANA_SERVICE = f"{RELEASE}-grafana"
GRAFANA_PORT = 80  # the grafana chart's service.port
GRAFANA_LOCAL_PORT = 3000
GRAFANA_CONTAINER_PORT = 3000  # the grafana chart's service.targetPort, what a NetworkPolicy names
ALERTMANAGER_NAME = f"{RELEASE}-alertmanager"  # the Alertmanager object (the chart's alertmanager.crname)
# Labels the pods carry: prometheus-operator v0.93 labels each pod `prometheus: <name>` or
# `alertmanager: <name>` (its object's name); the grafana chart's selector labels (templates/_helpers.tpl
# grafana.selectorLabels).
PROMETHEUS_POD_SELECTOR = {"matchLabels": {"prometheus": PROMETHEUS_NAME}}
ALERTMANAGER_POD_SELECTOR = {"matchLabels": {"alertmanager": ALERTMANAGER_NAME}}
GRAFANA_POD_SELECTOR = {"matchLabels": {"app.kubernetes.io/name": "grafana", "app.kubernetes.io/instance": RELEASE}}
# The chart's Grafana sidecar loads every ConfigMap with this label, from every namespace (values.yaml
# grafana.sidecar.dashboards: label grafana_dashboard, labelValue "1", searchNamespace ALL).
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
# The chart's default datasource (grafana.sidecar.datasources name/uid); Ray's head names it in the
# links it builds (RAY_PROMETHEUS_NAME, default "Prometheus": ray 2.58 metrics_head.py).
DATASOURCE_NAME = "Prometheus"
DATASOURCE_UID = "prometheus"
RULE_NAME = "ray-llm-alerts"
HEAD_MONITOR, WORKER_MONITOR = "ray-head", "ray-workers"
KUBERAY_MONITOR = "kuberay-operator"
# The Prometheus pod's persistent volume claim, as the StatefulSet names it: <claim template>-<pod>,
# the template `prometheus-<name>-db` and the pod `prometheus-<name>-0` (prometheus-operator v0.93.0
# pkg/prometheus/common.go VolumeName, pkg/prometheus/operator.go statefulSetNameFromPrometheusName).
PROMETHEUS_CLAIM = f"prometheus-{PROMETHEUS_NAME}-db-prometheus-{PROMETHEUS_NAME}-0"
STORAGE_CLASS = "gp3"

# What Ray pods serve metrics on. `metrics` is KubeRay's (v1.7.0 utils/constant.go DefaultMetricsPort,
# added to every Ray container that lacks it, common/pod.go); on the head also the autoscaler's monitor
# (ray 2.58 autoscaler/_private/constants.py AUTOSCALER_METRIC_PORT) and the dashboard's own metrics
# (dashboard/consts.py DASHBOARD_METRIC_PORT): the three endpoints of Ray's head PodMonitor in its
# KubeRay guide (doc/source/cluster/kubernetes/k8s-ecosystem/prometheus-grafana.md, step 5).
WORKER_METRICS_PORTS = {"metrics": HEAD_METRICS_PORTS["metrics"]}

# Prometheus storage. Budget, not a measurement: 100,000 active series (node-exporter, cAdvisor and
# kube-state-metrics of a few nodes, Ray's and vLLM's metrics of every Ray node, DCGM), scraped every
# 30 s, ~2 bytes per sample on disk (Prometheus docs, storage.md "Operational aspects": 1-2 bytes).
# Check it after a deploy with `prometheus_tsdb_head_series`.
SCRAPE_INTERVAL_S = 30
# How often Ray's metrics agent exports what its workers recorded: Ray 2.58's default, which the stack keeps
# (metrics_report_interval_ms in src/ray/common/ray_config_def.h; ray._raylet.Config.metrics_report_interval_ms()).
RAY_METRICS_EXPORT_S = 10
SERIES_BUDGET = 100_000
BYTES_PER_SAMPLE = 2
# retentionSize caps what Prometheus keeps below the volume: WAL and head chunks count towards it and
# compaction needs room for a block beside its sources (Prometheus docs, storage.md).
RETENTION_SIZE_SHARE = 0.8


# The `observability` key's defaults for `embedded` (docs/observability.md).
DEFAULT_RETENTION_DAYS = 15
DEFAULT_STORAGE_GIB = 20


def storage_need_gib(retention_days: int, series: int = SERIES_BUDGET) -> float:
    """Disk that `retention_days` of the series budget needs (Prometheus's own formula:
    retention seconds x samples per second x bytes per sample)."""
    return retention_days * 86400 * series / SCRAPE_INTERVAL_S * BYTES_PER_SAMPLE / 2**30


@dataclass(frozen=True)
class ObservabilitySettings:
    """The stack's `observability` mapping, checked, plus the charts' pins (their own keys)."""

    mode: str = "none"  # Settings built without a stack have none; a stack's default is in parse
    retention_days: int = DEFAULT_RETENTION_DAYS
    storage_gib: int = DEFAULT_STORAGE_GIB
    grafana_iframe_host: str = f"http://127.0.0.1:{GRAFANA_LOCAL_PORT}"
    grafana_anonymous: bool = False  # anonymous Viewer: Ray's dashboard shows Grafana's panels without a login
    # external: the `release` label value the cluster's Prometheus selects, and its namespace (NetworkPolicy)
    prometheus_release: str = RELEASE
    prometheus_namespace: str = NAMESPACE
    stack_chart: ChartPin | None = None
    dcgm_chart: ChartPin | None = None

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    @property
    def in_cluster_stack(self) -> bool:
        return self.mode in IN_CLUSTER_STACK

    @property
    def grafana(self) -> bool:
        """Our Grafana (embedded only: with AMP, Amazon Managed Grafana is the team's own)."""
        return self.mode == "embedded"


def selector_labels(release: str) -> dict[str, str]:
    """The label our PodMonitors, ServiceMonitors and rule carry for the Prometheus (of Helm release
    `release`) that selects them."""
    return {RELEASE_LABEL: release}


def retention_size_gib(storage_gib: int) -> int:
    return math.floor(storage_gib * RETENTION_SIZE_SHARE)


def check_retention_days(key: str, value: int, file: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3650:
        raise ConfigError(key, value, "1 to 3650 days", file)
    return value


def check_storage_gib(key: str, value: int, retention_days: int, file: str | None = None) -> int:
    """At least what `retention_days` of the series budget needs, Prometheus filling its share of it."""
    need = storage_need_gib(retention_days)
    least = math.ceil(need / RETENTION_SIZE_SHARE)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 16384:
        raise ConfigError(
            key,
            value,
            f"{least} to 16384 GiB: {retention_days} days of {SERIES_BUDGET:,} series at {SCRAPE_INTERVAL_S} s "
            f"need {need:.1f} GiB, and Prometheus may fill {RETENTION_SIZE_SHARE:.0%} of the volume "
            "(ray_llm_eks/domain/telemetry/observability.py)",
            file,
        )
    return value


_FIELDS: Mapping[str, type] = {
    "mode": str,
    "retentionDays": int,
    "storageGiB": int,
    "grafanaIframeHost": str,
    "grafanaAnonymous": bool,
    "prometheusRelease": str,
    "prometheusNamespace": str,
}
_EMBEDDED_ONLY = ("retentionDays", "storageGiB", "grafanaIframeHost", "grafanaAnonymous")
_EXTERNAL_ONLY = ("prometheusRelease", "prometheusNamespace")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
KEY = "observability"
SHAPE = mapping_of(_FIELDS)


def load(raw: RawConfig, existing_cluster: bool) -> ObservabilitySettings:
    """The stack's `observability` section and the two charts it installs."""
    return parse(
        raw.mapping(KEY, SHAPE),
        existing_cluster,
        stack_chart=chart_pin(raw, "kubePrometheusStackVersion", KUBE_PROMETHEUS_STACK_CHART),
        dcgm_chart=chart_pin(raw, "dcgmExporterVersion", DCGM_EXPORTER_CHART),
    )


def parse(raw: Any, existing_cluster: bool, stack_chart: ChartPin, dcgm_chart: ChartPin) -> ObservabilitySettings:
    """The `observability` mapping (None: unset). Embedded by default on a cluster this stack creates,
    none on an existing one (it may run a monitoring stack of its own: `external` adds ours to it)."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(KEY, raw, SHAPE)
    for name, value in raw.items():
        kind = _FIELDS.get(name)
        if kind is None:
            raise unknown_field(KEY, name, value, _FIELDS)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{KEY}.{name}", value, kind_text(kind))
    mode = check_one_of(f"{KEY}.mode", raw.get("mode", "none" if existing_cluster else "embedded"), MODES)
    if existing_cluster and mode in IN_CLUSTER_STACK:
        raise ConfigError(
            f"{KEY}.mode",
            mode,
            "external or none on an existing cluster (embedded and amp install kube-prometheus-stack and its "
            "storage into the cluster this stack creates; external adds our monitors to the cluster's own "
            "Prometheus Operator)",
        )
    for name in _EMBEDDED_ONLY:
        if name in raw and mode != "embedded":
            raise ConfigError(f"{KEY}.{name}", raw[name], "only with mode embedded (our own Prometheus and Grafana)")
    for name in _EXTERNAL_ONLY:
        if name in raw and mode != "external":
            raise ConfigError(f"{KEY}.{name}", raw[name], "only with mode external (the cluster's own Prometheus)")
    settings = ObservabilitySettings(
        mode=mode,
        retention_days=raw.get("retentionDays", ObservabilitySettings.retention_days),
        storage_gib=raw.get("storageGiB", ObservabilitySettings.storage_gib),
        grafana_iframe_host=raw.get("grafanaIframeHost", ObservabilitySettings.grafana_iframe_host),
        grafana_anonymous=raw.get("grafanaAnonymous", ObservabilitySettings.grafana_anonymous),
        prometheus_release=raw.get("prometheusRelease", RELEASE),
        prometheus_namespace=raw.get("prometheusNamespace", NAMESPACE),
        stack_chart=stack_chart,
        dcgm_chart=dcgm_chart,
    )
    check_retention_days(f"{KEY}.retentionDays", settings.retention_days)
    check_storage_gib(f"{KEY}.storageGiB", settings.storage_gib, settings.retention_days)
    if not re.fullmatch(r"https?://[^\s/]+(/[^\s]*)?", settings.grafana_iframe_host):
        raise ConfigError(
            f"{KEY}.grafanaIframeHost",
            settings.grafana_iframe_host,
            "the URL your browser reaches Grafana at, with http:// or https:// (Ray's dashboard embeds its panels)",
        )
    check_label_value(f"{KEY}.prometheusRelease", settings.prometheus_release)
    if not _NAMESPACE.fullmatch(settings.prometheus_namespace):
        raise ConfigError(f"{KEY}.prometheusNamespace", settings.prometheus_namespace, "a namespace (DNS-1123 label)")
    return settings


# ---------------------------------------------------------------------------------------------
# The Ray head: where its dashboard finds Grafana and Prometheus


def head_env(obs: ObservabilitySettings) -> list[dict]:
    """Ray 2.58 dashboard/modules/metrics/metrics_head.py: RAY_GRAFANA_HOST (the head's health check of
    Grafana), RAY_GRAFANA_IFRAME_HOST (what the browser loads the panels from; `http://` required),
    RAY_PROMETHEUS_HOST (the head's own queries), RAY_PROMETHEUS_NAME (the datasource in the panel links)."""
    if not obs.grafana:
        return []
    return [
        {"name": "RAY_GRAFANA_HOST", "value": f"http://{GRAFANA_SERVICE}.{NAMESPACE}.svc:{GRAFANA_PORT}"},
        {"name": "RAY_GRAFANA_IFRAME_HOST", "value": obs.grafana_iframe_host},
        {"name": "RAY_PROMETHEUS_HOST", "value": f"http://{PROMETHEUS_NAME}.{NAMESPACE}.svc:{PROMETHEUS_PORT}"},
        {"name": "RAY_PROMETHEUS_NAME", "value": DATASOURCE_NAME},
    ]


def head_ports(obs: ObservabilitySettings) -> dict[str, int]:
    """Named container ports the head PodMonitor scrapes beyond KubeRay's `metrics`."""
    return {k: v for k, v in HEAD_METRICS_PORTS.items() if k != "metrics"} if obs.enabled else {}


def metrics_ports(obs: ObservabilitySettings) -> list[int]:
    """Ports Prometheus must reach on Ray pods (the namespace's NetworkPolicy opens them to it)."""
    return sorted(set(HEAD_METRICS_PORTS.values()) | set(WORKER_METRICS_PORTS.values())) if obs.enabled else []


def grafana_port_forward(obs: ObservabilitySettings) -> str | None:
    if not obs.grafana:
        return None
    return f"kubectl -n {NAMESPACE} port-forward svc/{GRAFANA_SERVICE} {GRAFANA_LOCAL_PORT}:{GRAFANA_PORT}"
