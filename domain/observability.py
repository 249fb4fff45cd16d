"""Observability in the graph, as plain data: the `observability` stack setting, the values of the
pinned charts (kube-prometheus-stack, NVIDIA's DCGM exporter), the Prometheus Operator objects that
watch the RayService (PodMonitors, the PrometheusRule, the KubeRay operator's ServiceMonitor), the
dashboards' ConfigMaps, the storage Prometheus writes to, and what all of it takes from the nodes.

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

from domain.errors import ConfigError, kind_text, mapping_of, unknown_field
from domain.facts import HEAD_METRICS_PORTS
from domain.field_checks import check_label_value, check_one_of
from domain.placement import GPU_NODE_SELECTOR, GPU_TOLERATION, SYSTEM_LABELS, ZONE_LABEL
from domain.sizing import Resources

if TYPE_CHECKING:
    from domain.versions import ChartPin

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

    mode: str = "none"  # Settings built without a stack have none; a stack's default is in load_observability
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
            "(domain/observability.py)",
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
SHAPE = mapping_of(_FIELDS)


def load_observability(
    raw: Any, existing_cluster: bool, stack_chart: ChartPin, dcgm_chart: ChartPin
) -> ObservabilitySettings:
    """The `observability` mapping (None: unset). Embedded by default on a cluster this stack creates,
    none on an existing one (it may run a monitoring stack of its own: `external` adds ours to it)."""
    key = "observability"
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(key, raw, SHAPE)
    for name, value in raw.items():
        kind = _FIELDS.get(name)
        if kind is None:
            raise unknown_field(key, name, value, _FIELDS)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{key}.{name}", value, kind_text(kind))
    mode = check_one_of(f"{key}.mode", raw.get("mode", "none" if existing_cluster else "embedded"), MODES)
    if existing_cluster and mode in IN_CLUSTER_STACK:
        raise ConfigError(
            f"{key}.mode",
            mode,
            "external or none on an existing cluster (embedded and amp install kube-prometheus-stack and its "
            "storage into the cluster this stack creates; external adds our monitors to the cluster's own "
            "Prometheus Operator)",
        )
    for name in _EMBEDDED_ONLY:
        if name in raw and mode != "embedded":
            raise ConfigError(f"{key}.{name}", raw[name], "only with mode embedded (our own Prometheus and Grafana)")
    for name in _EXTERNAL_ONLY:
        if name in raw and mode != "external":
            raise ConfigError(f"{key}.{name}", raw[name], "only with mode external (the cluster's own Prometheus)")
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
    check_retention_days(f"{key}.retentionDays", settings.retention_days)
    check_storage_gib(f"{key}.storageGiB", settings.storage_gib, settings.retention_days)
    if not re.fullmatch(r"https?://[^\s/]+(/[^\s]*)?", settings.grafana_iframe_host):
        raise ConfigError(
            f"{key}.grafanaIframeHost",
            settings.grafana_iframe_host,
            "the URL your browser reaches Grafana at, with http:// or https:// (Ray's dashboard embeds its panels)",
        )
    check_label_value(f"{key}.prometheusRelease", settings.prometheus_release)
    if not _NAMESPACE.fullmatch(settings.prometheus_namespace):
        raise ConfigError(f"{key}.prometheusNamespace", settings.prometheus_namespace, "a namespace (DNS-1123 label)")
    return settings


# ---------------------------------------------------------------------------------------------
# What it takes from the nodes: requests we set on every pod we add (the fit check counts them).

# kube-prometheus (prometheus-operator/kube-prometheus v0.18.0 manifests/*) requests, the reference
# deployment of the same components: prometheusOperator-deployment.yaml, kubeStateMetrics-
# deployment.yaml, nodeExporter-daemonset.yaml, grafana-deployment.yaml, alertmanager-alertmanager.yaml.
OPERATOR_REQUESTS = Resources(100, 100)
KUBE_STATE_METRICS_REQUESTS = Resources(10, 190)
NODE_EXPORTER_REQUESTS = Resources(102, 180)
GRAFANA_REQUESTS = Resources(100, 100)
ALERTMANAGER_REQUESTS = Resources(4, 100)
# Each of Grafana's two sidecars (dashboards, datasources): the grafana chart 12.11.1 values.yaml
# sidecar.resources example.
GRAFANA_SIDECAR_REQUESTS = Resources(50, 50)
# The config reloader beside Prometheus and Alertmanager: prometheus-operator v0.93.0
# cmd/operator/main.go defaultReloaderCPU / defaultReloaderMemory (the chart leaves them to it).
CONFIG_RELOADER_REQUESTS = Resources(10, 50)
# Prometheus itself, for the series budget above: ~3 KiB per active series in the head block
# (Prometheus's rule of thumb) is 300 MiB; the rest is WAL replay and queries. Memory may burst to
# twice this (limit) before the kernel stops it; the Ray head, requests equal to limits, is never the
# one evicted for it.
PROMETHEUS_REQUESTS = Resources(200, 1024)
PROMETHEUS_MEMORY_LIMIT_MIB = 2048
# NVIDIA's chart default (dcgm-exporter 4.8.2 deployment/values.yaml resources.requests; limit 512Mi).
DCGM_EXPORTER_REQUESTS = Resources(100, 128)
# The EBS CSI driver add-on (aws-ebs-csi-driver chart 2.64.0 values.yaml): every controller container
# (plugin, provisioner, attacher, snapshotter, volume modifier, resizer, liveness probe) 10m / 40Mi,
# one replica; the node DaemonSet's three containers the same, on system nodes only.
EBS_CSI_CONTROLLER_REQUESTS = Resources(7 * 10, 7 * 40)
EBS_CSI_NODE_REQUESTS = Resources(3 * 10, 3 * 40)


def _total(*parts: Resources) -> Resources:
    return Resources(sum(p.cpu_m for p in parts), sum(p.memory_mib for p in parts))


def system_pods(obs: ObservabilitySettings) -> dict[str, Resources]:
    """What our monitoring runs on the system node (one node must hold all of it, with the Ray head)."""
    if not obs.in_cluster_stack:
        return {}
    pods = {
        "prometheus": _total(PROMETHEUS_REQUESTS, CONFIG_RELOADER_REQUESTS),
        "prometheus-operator": OPERATOR_REQUESTS,
        "kube-state-metrics": KUBE_STATE_METRICS_REQUESTS,
        "node-exporter": NODE_EXPORTER_REQUESTS,
    }
    if obs.mode == "embedded":
        pods |= {
            "alertmanager": _total(ALERTMANAGER_REQUESTS, CONFIG_RELOADER_REQUESTS),
            "grafana": _total(GRAFANA_REQUESTS, GRAFANA_SIDECAR_REQUESTS, GRAFANA_SIDECAR_REQUESTS),
            "ebs-csi-controller": EBS_CSI_CONTROLLER_REQUESTS,
            "ebs-csi-node": EBS_CSI_NODE_REQUESTS,
        }
    return pods


def gpu_daemonsets(obs: ObservabilitySettings) -> dict[str, Resources]:
    """What our monitoring runs on every GPU node (the Ray worker is sized around it)."""
    if not obs.in_cluster_stack:
        return {}
    return {"node-exporter": NODE_EXPORTER_REQUESTS, "dcgm-exporter": DCGM_EXPORTER_REQUESTS}


def _resources(requests: Resources, memory_limit_mib: int | None = None) -> dict:
    """Requests; a memory limit where one bounds the pod (no CPU limits: throttling a scraper loses samples)."""
    limit = memory_limit_mib or requests.memory_mib
    return {"requests": requests.as_k8s(), "limits": {"memory": f"{limit}Mi"}}


# ---------------------------------------------------------------------------------------------
# The charts' values


def stack_values(
    mode: str,
    retention_days: int,
    storage_gib: int,
    grafana_anonymous: bool,
    remote_write_url: Any = None,
    region: str | None = None,
) -> dict:
    """kube-prometheus-stack values (chart 88.5.3 values.yaml) for `embedded` and `amp` (`mode`).
    `remote_write_url` (amp): the workspace's remote-write URL, known at deploy time."""
    system = {"nodeSelector": dict(SYSTEM_LABELS)}
    values: dict[str, Any] = {
        # EKS runs the control plane: its scheduler, controller manager and etcd cannot be scraped and
        # their "down" alerts would always fire; kube-proxy's metrics are bound per the add-on's config.
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeEtcd": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "prometheusOperator": {
            **system,
            "resources": _resources(OPERATOR_REQUESTS, 200),
            "admissionWebhooks": {"patch": dict(system)},
        },
        "kube-state-metrics": {**system, "resources": _resources(KUBE_STATE_METRICS_REQUESTS, 250)},
        # Every node, GPU nodes included (the chart tolerates every NoSchedule taint).
        "prometheus-node-exporter": {"resources": _resources(NODE_EXPORTER_REQUESTS)},
        "prometheus": {
            "serviceAccount": {"create": True, "name": PROMETHEUS_NAME},
            "prometheusSpec": {
                **system,
                "resources": _resources(PROMETHEUS_REQUESTS, PROMETHEUS_MEMORY_LIMIT_MIB),
                "scrapeInterval": f"{SCRAPE_INTERVAL_S}s",  # what the storage budget assumes
                # Prometheus stops in seconds; the operator's default grace is 600 s, which `destroy`
                # would wait out before the volume can go.
                "terminationGracePeriodSeconds": 120,
            },
        },
    }
    prometheus = values["prometheus"]["prometheusSpec"]
    if mode == "embedded":
        prometheus |= {
            "retention": f"{retention_days}d",
            "retentionSize": f"{retention_size_gib(storage_gib)}GiB",
            # The claim this stack declares (components/observability.py) on the volume it declares:
            # the StatefulSet finds it by name and keeps it (Retain) when the operator recreates it.
            "storageSpec": {
                "volumeClaimTemplate": {
                    "spec": {
                        "storageClassName": STORAGE_CLASS,
                        "volumeName": prometheus_volume_name(),
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": f"{storage_gib}Gi"}},
                    }
                }
            },
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
        }
        values["alertmanager"] = {
            "alertmanagerSpec": {**system, "resources": _resources(ALERTMANAGER_REQUESTS)},
        }
        values["grafana"] = {
            **system,
            "resources": _resources(GRAFANA_REQUESTS, 200),
            "sidecar": {"resources": _resources(GRAFANA_SIDECAR_REQUESTS, 100)},
            # Ray's dashboard embeds Grafana's panels in an iframe (Ray 2.58's KubeRay guide, the
            # overrides of its kube-prometheus-stack install); they show once the browser has logged in
            # to Grafana, or without a login with grafanaAnonymous (Viewer). Grafana has no Service
            # outside the cluster: reach it by `kubectl port-forward` (grafanaPortForwardCommand).
            "grafana.ini": {
                "security": {"allow_embedding": True},
                "auth.anonymous": {"enabled": grafana_anonymous, "org_role": "Viewer"},
            },
        }
    else:  # amp: scrape and forward only; the workspace stores, evaluates the rules and answers queries
        # SigV4 with the pod's EKS Pod Identity credentials: Prometheus v3.14.0 (Go module v0.314.0) signs
        # through github.com/prometheus/sigv4 v0.4.1, whose aws-sdk-go-v2 default chain reads the
        # container credentials Pod Identity injects (config resolve_credentials.go,
        # AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE).
        values["prometheus"]["agentMode"] = True
        prometheus["remoteWrite"] = [{"url": remote_write_url, "sigv4": {"region": region}}]
        values["alertmanager"] = {"enabled": False}
        values["grafana"] = {"enabled": False}
        values["defaultRules"] = {"create": False}  # an agent evaluates no rules
    return values


def dcgm_values() -> dict:
    """NVIDIA's DCGM exporter (chart 4.8.2 values.yaml) on GPU nodes only, its ServiceMonitor selected
    by our Prometheus (installed with it, release RELEASE)."""
    return {
        "nodeSelector": dict(GPU_NODE_SELECTOR),
        # The chart tolerates only the control-plane taint by default; ours marks every GPU node.
        "tolerations": [dict(GPU_TOLERATION)],
        "resources": _resources(DCGM_EXPORTER_REQUESTS, 512),
        "serviceMonitor": {"enabled": True, "additionalLabels": selector_labels(RELEASE)},
    }


# ---------------------------------------------------------------------------------------------
# Storage: the EBS volume, its PersistentVolume and the claim, all in the graph (destroy removes them
# in that reverse order, while the EBS CSI driver still runs to detach the volume).


EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"  # aws-ebs-csi-driver chart 2.64.0 controller.serviceAccount.name


def ebs_csi_configuration(region: str) -> dict:
    """The EBS CSI add-on's configuration values (its Helm chart's values): controller and node plugin
    on the system nodes only, where the volumes are mounted; one controller replica (leader-elected
    anyway). On GPU nodes its DaemonSet would take room from the Ray workers for nothing. The
    controller's region is given (the chart's controller.region, its AWS_REGION): with hop limit 1 its
    pod cannot ask the instance metadata; the node plugin falls back from the instance metadata to the
    Kubernetes API for its node's zone and instance (aws-ebs-csi-driver pkg/cloud/metadata/metadata.go,
    NewMetadataService, DefaultMetadataSources)."""
    return {
        "controller": {"replicaCount": 1, "nodeSelector": dict(SYSTEM_LABELS), "region": region},
        "node": {"nodeSelector": dict(SYSTEM_LABELS), "tolerateAllTaints": False},
    }


def prometheus_volume_name() -> str:
    return f"{PROMETHEUS_NAME}-data"


def storage_class() -> dict:
    """gp3, encrypted, deleted with its claim; bound where the pod lands (EBS volumes are zonal)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "encrypted": "true", "csi.storage.k8s.io/fstype": "ext4"},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


def _in_zone(zone: str) -> dict:
    return {"key": ZONE_LABEL, "operator": "In", "values": [zone]}


def persistent_volume(volume_id: Any, zone: str, size_gib: int) -> dict:
    """The volume this stack created, for Prometheus's claim only (claimRef). Retain: the EBS volume
    is Pulumi's to delete, not the driver's."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": prometheus_volume_name()},
        "spec": {
            "capacity": {"storage": f"{size_gib}Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": STORAGE_CLASS,
            "claimRef": {"namespace": NAMESPACE, "name": PROMETHEUS_CLAIM},
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": volume_id, "fsType": "ext4"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}
                    ]
                }
            },
        },
    }


def persistent_volume_claim(size_gib: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": PROMETHEUS_CLAIM, "namespace": NAMESPACE},
        "spec": {
            "storageClassName": STORAGE_CLASS,
            "volumeName": prometheus_volume_name(),
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{size_gib}Gi"}},
        },
    }


# ---------------------------------------------------------------------------------------------
# The objects that watch the RayService, in its namespace


def _ray_cluster_relabel() -> list[dict]:
    """Each series names its RayCluster (`ray_io_cluster`), as Ray's guide relabels it: Ray's dashboards
    filter on it (their `Cluster` variable)."""
    return [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_label_ray_io_cluster"],
            "targetLabel": "ray_io_cluster",
        }
    ]


def pod_monitors(release: str, namespace: str) -> list[dict]:
    """Head and workers, each by PodMonitor: a RayService has two Services in front of its head (its
    own and the RayCluster's), so a ServiceMonitor would scrape the head twice (Ray 2.58's KubeRay guide,
    step 5). KubeRay labels every pod with its node type (v1.7.0 utils/constant.go RayNodeTypeLabelKey)."""

    def monitor(name: str, node_type: str, ports: Mapping[str, int]) -> dict:
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": {"name": name, "namespace": namespace, "labels": selector_labels(release)},
            "spec": {
                "selector": {"matchLabels": {"ray.io/node-type": node_type}},
                "podMetricsEndpoints": [{"port": port, "relabelings": _ray_cluster_relabel()} for port in ports],
            },
        }

    return [
        monitor(HEAD_MONITOR, "head", HEAD_METRICS_PORTS),
        monitor(WORKER_MONITOR, "worker", WORKER_METRICS_PORTS),
    ]


def kuberay_service_monitor(release: str, operator_namespace: str) -> dict:
    """The KubeRay operator's own metrics (RayService readiness, kuberay_service_*): the same monitor its
    chart would create (kuberay-operator 1.7.0 templates/servicemonitor.yaml), declared here so the
    operator's release needs no Prometheus CRD."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": KUBERAY_MONITOR, "namespace": operator_namespace, "labels": selector_labels(release)},
        "spec": {
            "endpoints": [{"path": "/metrics", "targetPort": "http", "interval": "30s", "honorLabels": True}],
            "namespaceSelector": {"matchNames": [operator_namespace]},
            "selector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
        },
    }


def prometheus_rule(release: str, namespace: str, spec: Mapping[str, Any]) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "namespace": namespace, "labels": selector_labels(release)},
        "spec": dict(spec),
    }


def dashboard_config_maps(namespace: str, dashboards: Mapping[str, str]) -> list[dict]:
    """One ConfigMap per dashboard file, labelled for Grafana's sidecar."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"dashboard-{file.removesuffix('.json')}",
                "namespace": namespace,
                "labels": dict(DASHBOARD_LABEL),
            },
            "data": {file: text},
        }
        for file, text in sorted(dashboards.items())
    ]


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
