"""Observability in the graph (ray_llm_eks/domain/telemetry/observability.py says what and why): the EBS CSI driver and
a gp3 StorageClass, the monitoring stack (kube-prometheus-stack, the DCGM exporter, Prometheus's volume;
or an Amazon Managed Service for Prometheus workspace), and the monitors, rule and dashboards that
watch the RayService. `destroy` removes it all in reverse: the monitors, then the charts, then
Prometheus's claim, volume object and EBS volume, and only then the CSI driver that detaches it.

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import yaml

from ray_llm_eks.adapters import botocore_facts, teardown
from ray_llm_eks.components.args import fill_defaults, present
from ray_llm_eks.components.helm import helm_release
from ray_llm_eks.components.network_policies import NamespaceNetworkPolicies
from ray_llm_eks.components.pod_identity import default_version_addon, pod_identity_role
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.platform import versions
from ray_llm_eks.domain.platform.field_checks import (
    check_chart_version,
    check_cluster_name,
    check_kubernetes_version,
    check_label_value,
    check_namespace,
    check_one_of,
    check_region,
)
from ray_llm_eks.domain.platform.versions import DCGM_EXPORTER_CHART, KUBE_PROMETHEUS_STACK_CHART, ChartPin
from ray_llm_eks.domain.security import pod_security
from ray_llm_eks.domain.telemetry import monitoring_release, observability

EBS_ARGS = "EbsCsiDriverArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())


@dataclass(frozen=True)
class EbsCsiDriverArgs:
    """The cluster the EBS CSI driver add-on goes on; its version is EKS's default for the cluster's."""

    cluster_name: str
    """The EKS cluster's name (config key clusterName)."""
    region: str
    """The cluster's AWS region: the partition of the driver's managed IAM policy."""
    kubernetes_version: str | None = default("kubernetesVersion")
    """The cluster's EKS version (config key kubernetesVersion): the add-on's default version for it."""
    addon_version: str | None = None
    """The add-on's kept version (config key eksAddonVersions); none: EKS's default for the cluster's version now."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_cluster_name("cluster_name", self.cluster_name, EBS_ARGS)
        check_region("region", self.region, botocore_facts.load(), EBS_ARGS)
        check_kubernetes_version("kubernetes_version", self.kubernetes_version, EBS_ARGS)


class EbsCsiDriver(pulumi.ComponentResource):
    """The aws-ebs-csi-driver EKS add-on (its IAM role through EKS Pod Identity) and the gp3
    StorageClass. Everything that mounts an EBS volume waits for it, so it outlives those volumes."""

    TYPE = "ray-llm-eks:observability:EbsCsiDriver"  # the shipped program's resources keep their URNs

    def __init__(
        self,
        name: str,
        args: EbsCsiDriverArgs,
        agent: pulumi.Resource,
        opts: pulumi.ResourceOptions,
        reclaim_kubeconfig: pulumi.Input[str] | None = None,
        nodes: Sequence[pulumi.Resource] = (),
    ):
        """`agent`: the cluster's EKS Pod Identity agent (ray_llm_eks/components/pod_identity.py), the role's way to the
        pod. `reclaim_kubeconfig`: where claims outside the graph get volumes of the StorageClass (rocksdb's), the
        cluster's kubeconfig: on destroy the driver, the StorageClass and `nodes` wait until the driver has
        deleted those volumes (ray_llm_eks/domain/platform/teardown.py)."""
        super().__init__(self.TYPE, name, None, opts)
        cluster_name, kubernetes_version = args.cluster_name, args.kubernetes_version
        child = pulumi.ResourceOptions(parent=self)
        # The add-on's association: its controller's service account in kube-system (EKS's ebs-csi add-on).
        role = pod_identity_role(
            f"{name}-role", self, cluster_name, ("kube-system", monitoring_release.EBS_CSI_SERVICE_ACCOUNT)
        )
        partition = botocore_facts.load().region_partition(args.region)
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-policy",
            role=role.name,
            # AWS's managed policy for the driver (EKS user guide, ebs-csi: create an IAM role).
            policy_arn=f"arn:{partition}:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy",
            opts=child,
        )
        self.addon = default_version_addon(
            name,
            cluster_name,
            versions.EBS_CSI_ADDON,
            kubernetes_version,
            pulumi.ResourceOptions(parent=self, depends_on=[agent, attachment]),
            version=args.addon_version,
            configuration_values=json.dumps(monitoring_release.ebs_csi_configuration(args.region), sort_keys=True),
            pod_identity_associations=[
                aws.eks.AddonPodIdentityAssociationArgs(
                    role_arn=role.arn, service_account=monitoring_release.EBS_CSI_SERVICE_ACCOUNT
                )
            ],
        )
        manifest = monitoring_release.storage_class()
        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-gp3",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=manifest["metadata"]["name"]),
            provisioner=manifest["provisioner"],
            parameters=manifest["parameters"],
            reclaim_policy=manifest["reclaimPolicy"],
            volume_binding_mode=manifest["volumeBindingMode"],
            allow_volume_expansion=manifest["allowVolumeExpansion"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.addon]),
        )
        self.reclaim_wait = None
        if reclaim_kubeconfig is not None:
            self.reclaim_wait = reclaim_wait(
                f"{name}-volumes-reclaimed",
                manifest["metadata"]["name"],
                reclaim_kubeconfig,
                pulumi.ResourceOptions(parent=self, depends_on=[self.addon, self.storage_class, *nodes]),
            )
        self.register_outputs({})


def reclaim_wait(
    name: str, storage_class: str, kubeconfig: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> pulumi.Stash:
    """A resource whose deletion waits until no volume of `storage_class` is left for the CSI driver to delete:
    everything that makes claims waits for it (they go first on destroy), and it waits for the driver, the
    StorageClass and the nodes (they go after it). The wait is a before-delete resource hook, which the engine
    runs only under `pulumi destroy --run-program` (pulumi/resource_hooks.py ResourceHookBinding; `make destroy`
    passes it). The kubeconfig is kept in its state (a secret) because the hook sees only the state being
    deleted (ResourceHookArgs.old_outputs)."""
    hook = pulumi.ResourceHook(name, _wait_for_reclaim)
    return pulumi.Stash(
        name,
        input=pulumi.Output.secret(pulumi.Output.all(kubeconfig=kubeconfig, storageClass=storage_class).apply(dict)),
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(hooks=pulumi.ResourceHookBinding(before_delete=[hook]))
        ),
    )


async def _wait_for_reclaim(args: pulumi.ResourceHookArgs) -> None:
    outputs = args.old_outputs or {}
    stored = outputs.get("input") or outputs.get("output")  # the latest value, else the first
    if isinstance(stored, pulumi.Output):
        stored = await stored.future()  # a secret in the state
    if not stored or not stored.get("kubeconfig"):
        raise RuntimeError(f"{args.name}: no kubeconfig in its state, nothing to wait with")
    await asyncio.to_thread(teardown.wait_until_reclaimed_from_kubeconfig, stored["kubeconfig"], stored["storageClass"])


def _metadata(manifest: dict) -> k8s.meta.v1.ObjectMetaArgs:
    meta = manifest["metadata"]
    return k8s.meta.v1.ObjectMetaArgs(name=meta["name"], namespace=meta.get("namespace"), labels=meta.get("labels"))


def custom_object(name: str, manifest: dict, opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """A custom object from its manifest: the Prometheus Operator's (PodMonitor, ServiceMonitor,
    PrometheusRule), Karpenter's (NodePool, EC2NodeClass)."""
    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=_metadata(manifest),
        spec=manifest["spec"],
        opts=opts,
    )


# names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())
MONITORING_ARGS = "MonitoringStackArgs"


@dataclass(frozen=True)
class MonitoringStackArgs:
    """kube-prometheus-stack and the DCGM exporter, and where Prometheus keeps its data: its own EBS volume
    (embedded) or an Amazon Managed Service for Prometheus workspace (amp)."""

    cluster_name: str
    """The EKS cluster's name: the workspace's alias and its Pod Identity association's cluster (config key
    clusterName)."""
    region: str
    """The cluster's AWS region: where Prometheus signs its remote writes to the workspace (amp)."""
    availability_zone: str
    """The system nodes' zone, where Prometheus runs and its EBS volume goes (EBS volumes are zonal)."""
    mode: str | None = "embedded"
    """embedded (Prometheus on its own volume, Grafana, Alertmanager) or amp (config key observability.mode)."""
    retention_days: int | None = observability.DEFAULT_RETENTION_DAYS
    """Days Prometheus keeps, 1 to 3650 (embedded; config key observability.retentionDays)."""
    storage_gib: int | None = observability.DEFAULT_STORAGE_GIB
    """Prometheus's volume, at least what the retention needs (embedded; config key observability.storageGiB)."""
    grafana_anonymous: bool | None = False
    """Grafana's anonymous Viewer, so Ray's dashboard shows its panels without a login (embedded; config key
    observability.grafanaAnonymous)."""
    stack_chart_version: str | None = default("kubePrometheusStackVersion")
    """The kube-prometheus-stack chart's exact version (config key kubePrometheusStackVersion)."""
    dcgm_chart_version: str | None = default("dcgmExporterVersion")
    """The dcgm-exporter chart's exact version (config key dcgmExporterVersion)."""
    tags: Mapping[str, str] | None = None
    """AWS tags on Prometheus's volume or the workspace; none: no tags."""
    rule_spec: Mapping[str, Any] | None = None
    """The alert rules' PrometheusRule spec (ray_llm_eks/domain/telemetry/alerts.py renders the stack's): with amp the
    workspace evaluates them (an agent evaluates none); none: no rules there."""
    network_policies: Sequence[Mapping[str, Any]] | None = ()
    """NetworkPolicy manifests for the monitoring namespace (ray_llm_eks/domain/security/network_policies.py), before
    any pod."""
    keep_data: bool | None = False
    """Protect Prometheus's EBS volume (embedded; Pulumi refuses to delete or replace it): outside dev
    (ray_llm_eks/domain/platform/teardown.py)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_cluster_name("cluster_name", self.cluster_name, MONITORING_ARGS)
        check_one_of("mode", self.mode, observability.IN_CLUSTER_STACK, MONITORING_ARGS)
        observability.check_retention_days("retention_days", self.retention_days, MONITORING_ARGS)
        observability.check_storage_gib("storage_gib", self.storage_gib, self.retention_days, MONITORING_ARGS)
        check_chart_version(
            "stack_chart_version",
            self.stack_chart_version,
            KUBE_PROMETHEUS_STACK_CHART[1],
            default("kubePrometheusStackVersion"),
            MONITORING_ARGS,
        )
        check_chart_version(
            "dcgm_chart_version",
            self.dcgm_chart_version,
            DCGM_EXPORTER_CHART[1],
            default("dcgmExporterVersion"),
            MONITORING_ARGS,
        )


class PrometheusVolume(pulumi.ComponentResource):
    """Prometheus's EBS volume, declared by the stack, its PersistentVolume and the claim the
    StatefulSet adopts by name. On destroy the claim goes once the Prometheus pod is gone, then the
    PersistentVolume, then the EBS volume (its delete retries while the volume is still attached:
    terraform-provider-aws ebs_volume.go resourceEBSVolumeDelete, VolumeInUse), all before the CSI driver."""

    TYPE = "ray-llm-eks:observability:PrometheusVolume"  # the shipped program's resources keep their URNs

    def __init__(self, name: str, args: MonitoringStackArgs, namespace: pulumi.Resource, opts: pulumi.ResourceOptions):
        """`args`: the monitoring stack's (its zone, volume size and tags); `namespace`: the claim's."""
        super().__init__(self.TYPE, name, None, opts)
        zone = args.availability_zone
        self.volume = aws.ebs.Volume(
            name,
            availability_zone=zone,  # the system nodes' zone (ray_llm_eks/components/cluster.py)
            size=args.storage_gib,
            type="gp3",
            encrypted=True,
            tags=dict(args.tags or {}),
            opts=pulumi.ResourceOptions(
                parent=self, custom_timeouts=pulumi.CustomTimeouts(delete="15m"), protect=args.keep_data or None
            ),
        )
        pv = monitoring_release.persistent_volume(self.volume.id, zone, args.storage_gib)
        self.persistent_volume = k8s.core.v1.PersistentVolume(
            f"{name}-pv", metadata=_metadata(pv), spec=pv["spec"], opts=pulumi.ResourceOptions(parent=self)
        )
        claim = monitoring_release.persistent_volume_claim(args.storage_gib)
        self.claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim",
            metadata=_metadata(claim),
            spec=claim["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace, self.persistent_volume]),
        )
        self.register_outputs({"volumeId": self.volume.id})


class MonitoringStack(pulumi.ComponentResource):
    """kube-prometheus-stack in `monitoring` on the system node and the DCGM exporter on the GPU nodes.
    embedded: Prometheus on its own EBS volume, Grafana, Alertmanager. amp: the workspace, Prometheus as
    an agent remote-writing to it (SigV4, its role through EKS Pod Identity), the alert rules there."""

    TYPE = "ray-llm-eks:observability:MonitoringStack"  # the shipped program's resources keep their URNs

    def __init__(
        self,
        name: str,
        args: MonitoringStackArgs,
        opts: pulumi.ResourceOptions | None = None,
        agent: pulumi.Resource | None = None,
        storage: pulumi.Resource | None = None,
    ):
        """`agent`: the cluster's EKS Pod Identity agent (amp: the remote writer's role's way to the pod); `storage`:
        the EBS CSI driver (embedded: it attaches Prometheus's volume). Each is waited for where given; a caller of
        the hosted component, whose cluster runs them, says so with dependsOn."""
        super().__init__(self.TYPE, name, None, opts)
        cluster_name, tags, network_policies = args.cluster_name, dict(args.tags or {}), list(args.network_policies)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=observability.NAMESPACE, labels=pod_security.labels(pod_security.MONITORING)
            ),
            opts=child,
        )
        waits_for: list[pulumi.Resource] = [self.namespace]
        if network_policies:  # before any pod of the chart starts (ray_llm_eks/domain/security/network_policies.py)
            waits_for.append(
                NamespaceNetworkPolicies(
                    f"{name}-network-policies",
                    network_policies,
                    pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]),
                )
            )
        self.workspace: aws.amp.Workspace | None = None
        kept = (args.mode, args.retention_days, args.storage_gib, args.grafana_anonymous)  # stack_values takes them
        if args.mode == "embedded":
            self.volume = PrometheusVolume(
                f"{name}-prometheus-volume",
                args,
                self.namespace,
                pulumi.ResourceOptions(parent=self, depends_on=present(storage)),
            )
            waits_for.append(self.volume)
            values = monitoring_release.stack_values(*kept)
        else:
            self.workspace = aws.amp.Workspace(f"{name}-workspace", alias=cluster_name, tags=dict(tags), opts=child)
            role = pod_identity_role(
                f"{name}-remote-write-role",
                self,
                cluster_name,
                (observability.NAMESPACE, observability.PROMETHEUS_NAME),
            )
            policy = aws.iam.RolePolicy(
                f"{name}-remote-write",
                role=role.id,
                policy=self.workspace.arn.apply(
                    lambda arn: json.dumps(
                        {
                            "Version": "2012-10-17",
                            "Statement": [{"Effect": "Allow", "Action": ["aps:RemoteWrite"], "Resource": arn}],
                        }
                    )
                ),
                opts=child,
            )
            waits_for.append(
                aws.eks.PodIdentityAssociation(
                    f"{name}-prometheus-pod-identity",
                    cluster_name=cluster_name,
                    namespace=observability.NAMESPACE,
                    service_account=observability.PROMETHEUS_NAME,
                    role_arn=role.arn,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=present(agent, policy)),
                )
            )
            if args.rule_spec is not None:  # the workspace evaluates the alert rules (an agent evaluates none)
                aws.amp.RuleGroupNamespace(
                    f"{name}-rules",
                    name=observability.RULE_NAME,
                    workspace_id=self.workspace.id,
                    data=yaml.safe_dump(dict(args.rule_spec), sort_keys=False),
                    opts=child,
                )
            remote_write = self.workspace.prometheus_endpoint.apply(
                lambda url: f"{url.rstrip('/')}/api/v1/remote_write"
            )
            values = monitoring_release.stack_values(*kept, remote_write, args.region)
        self.release = helm_release(
            observability.RELEASE,
            ChartPin(*KUBE_PROMETHEUS_STACK_CHART, args.stack_chart_version),
            observability.NAMESPACE,
            values,
            pulumi.ResourceOptions(parent=self, depends_on=waits_for),
        )
        # Its ServiceMonitor needs the Prometheus Operator's CRDs, which the stack's chart installs.
        self.dcgm = helm_release(
            "dcgm-exporter",
            ChartPin(*DCGM_EXPORTER_CHART, args.dcgm_chart_version),
            observability.NAMESPACE,
            monitoring_release.dcgm_values(),
            pulumi.ResourceOptions(parent=self, depends_on=[self.release]),
        )
        self.register_outputs({})


# names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())
SERVICE_ARGS = "ServiceMonitoringArgs"


@dataclass(frozen=True)
class ServiceMonitoringArgs:
    """What watches a RayService, for the Prometheus Operator that selects objects labelled with its release."""

    namespace: str | None = default("namespace")
    """The RayService's namespace, where the monitors, rule and dashboards go (config key namespace)."""
    prometheus_release: str | None = observability.RELEASE
    """The `release` label value the watching Prometheus selects: ours (kube-prometheus-stack) or the
    cluster's own (config key observability.prometheusRelease)."""
    rule_spec: Mapping[str, Any] | None = None
    """The alert rules' spec (ray_llm_eks/domain/telemetry/alerts.py renders the stack's), as a PrometheusRule; none: no
    rule (with amp the workspace holds them, MonitoringStackArgs.rule_spec)."""
    dashboards: Mapping[str, str] | None = None
    """Grafana dashboards, file name -> JSON, as ConfigMaps its sidecar loads; none: none (amp: no Grafana)."""
    operator_namespace: str | None = None
    """The KubeRay operator's namespace, for its ServiceMonitor; none: no monitor (an operator not ours)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_namespace("namespace", self.namespace, SERVICE_ARGS)
        check_label_value("prometheus_release", self.prometheus_release, SERVICE_ARGS)


class ServiceMonitoring(pulumi.ComponentResource):
    """What watches the RayService, in its namespace: PodMonitors for the head and the workers, the
    alert rule (where Prometheus evaluates it), the dashboards for Grafana's sidecar, and the KubeRay
    operator's ServiceMonitor where this stack installs the operator."""

    TYPE = "ray-llm-eks:observability:ServiceMonitoring"  # the shipped program's resources keep their URNs

    def __init__(self, name: str, args: ServiceMonitoringArgs, opts: pulumi.ResourceOptions):
        super().__init__(self.TYPE, name, None, opts)
        namespace, release = args.namespace, args.prometheus_release
        child = pulumi.ResourceOptions(parent=self)
        self.monitors = [
            custom_object(f"{name}-{m['metadata']['name']}", m, child)
            for m in monitoring_release.pod_monitors(release, namespace)
        ]
        if args.operator_namespace is not None:
            custom_object(
                f"{name}-{observability.KUBERAY_MONITOR}",
                monitoring_release.kuberay_service_monitor(release, args.operator_namespace),
                child,
            )
        if args.rule_spec is not None:
            self.rule = custom_object(
                f"{name}-{observability.RULE_NAME}",
                monitoring_release.prometheus_rule(release, namespace, args.rule_spec),
                child,
            )
        if args.dashboards:
            self.dashboards = [
                k8s.core.v1.ConfigMap(
                    f"{name}-{cm['metadata']['name']}", metadata=_metadata(cm), data=cm["data"], opts=child
                )
                for cm in monitoring_release.dashboard_config_maps(namespace, args.dashboards)
            ]
        self.register_outputs({})
