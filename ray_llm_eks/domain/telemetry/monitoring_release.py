"""The in-cluster monitoring release as plain data: what its pods take from the nodes (the fit counts
them), the values of the pinned charts (kube-prometheus-stack, NVIDIA's DCGM exporter, the EBS CSI
driver's add-on), the storage Prometheus writes to, the Prometheus Operator objects that watch the
RayService (PodMonitors, the PrometheusRule, the KubeRay operator's ServiceMonitor) and the dashboards'
ConfigMaps. The `observability` setting and its names are ray_llm_eks/domain/telemetry/observability.py's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray_llm_eks.domain.core.facts import HEAD_METRICS_PORTS
from ray_llm_eks.domain.platform.placement import GPU_NODE_SELECTOR, GPU_TOLERATION, SYSTEM_LABELS, ZONE_LABEL
from ray_llm_eks.domain.platform.sizing import Resources
from ray_llm_eks.domain.telemetry.observability import (
    DASHBOARD_LABEL,
    HEAD_MONITOR,
    KUBERAY_MONITOR,
    NAMESPACE,
    PROMETHEUS_CLAIM,
    PROMETHEUS_NAME,
    RELEASE,
    RULE_NAME,
    SCRAPE_INTERVAL_S,
    STORAGE_CLASS,
    WORKER_METRICS_PORTS,
    WORKER_MONITOR,
    ObservabilitySettings,
    retention_size_gib,
    selector_labels,
)

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
            # The claim this stack declares (ray_llm_eks/components/observability.py) on the volume it declares:
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
