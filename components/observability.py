"""Observability in the graph (domain/observability.py says what and why): the EBS CSI driver and a
gp3 StorageClass, the monitoring stack (kube-prometheus-stack, the DCGM exporter, Prometheus's volume;
or an Amazon Managed Service for Prometheus workspace), and the monitors, rule and dashboards that
watch the RayService. `destroy` removes it all in reverse: the monitors, then the charts, then
Prometheus's claim, volume object and EBS volume, and only then the CSI driver that detaches it."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import yaml

from adapters import botocore_facts
from components.helm import helm_release
from components.network_policies import NamespaceNetworkPolicies
from components.pod_identity import default_version_addon, pod_identity_role
from domain import observability, pod_security, versions
from domain.observability import ObservabilitySettings


class EbsCsiDriver(pulumi.ComponentResource):
    """The aws-ebs-csi-driver EKS add-on (its IAM role through EKS Pod Identity) and the gp3
    StorageClass. Everything that mounts an EBS volume waits for it, so it outlives those volumes."""

    def __init__(
        self,
        name: str,
        cluster_name: str,
        kubernetes_version: str,
        region: str,
        agent: pulumi.Resource,
        opts: pulumi.ResourceOptions,
    ):
        super().__init__("ray-llm-eks:observability:EbsCsiDriver", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = pod_identity_role(f"{name}-role", self)
        partition = botocore_facts.load().region_partition(region)
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
            configuration_values=json.dumps(observability.ebs_csi_configuration(), sort_keys=True),
            pod_identity_associations=[
                aws.eks.AddonPodIdentityAssociationArgs(
                    role_arn=role.arn, service_account=observability.EBS_CSI_SERVICE_ACCOUNT
                )
            ],
        )
        manifest = observability.storage_class()
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
        self.register_outputs({})


def _metadata(manifest: dict) -> k8s.meta.v1.ObjectMetaArgs:
    meta = manifest["metadata"]
    return k8s.meta.v1.ObjectMetaArgs(name=meta["name"], namespace=meta.get("namespace"), labels=meta.get("labels"))


def custom_object(name: str, manifest: dict, opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """A Prometheus Operator object (PodMonitor, ServiceMonitor, PrometheusRule) from its manifest."""
    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=_metadata(manifest),
        spec=manifest["spec"],
        opts=opts,
    )


class PrometheusVolume(pulumi.ComponentResource):
    """Prometheus's EBS volume, declared by the stack, its PersistentVolume and the claim the
    StatefulSet adopts by name. On destroy the claim goes once the Prometheus pod is gone, then the
    PersistentVolume, then the EBS volume (its delete retries while the volume is still attached:
    terraform-provider-aws ebs_volume.go resourceEBSVolumeDelete, VolumeInUse), all before the CSI driver."""

    def __init__(
        self,
        name: str,
        obs: ObservabilitySettings,
        zone: str,
        tags: Mapping[str, str],
        namespace: pulumi.Resource,
        opts: pulumi.ResourceOptions,
    ):
        super().__init__("ray-llm-eks:observability:PrometheusVolume", name, None, opts)
        self.volume = aws.ebs.Volume(
            name,
            availability_zone=zone,  # the system nodes' zone (components/cluster.py)
            size=obs.storage_gib,
            type="gp3",
            encrypted=True,
            tags=dict(tags),
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=pulumi.CustomTimeouts(delete="15m")),
        )
        pv = observability.persistent_volume(self.volume.id, zone, obs.storage_gib)
        self.persistent_volume = k8s.core.v1.PersistentVolume(
            f"{name}-pv", metadata=_metadata(pv), spec=pv["spec"], opts=pulumi.ResourceOptions(parent=self)
        )
        claim = observability.persistent_volume_claim(obs.storage_gib)
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

    def __init__(
        self,
        name: str,
        obs: ObservabilitySettings,
        cluster_name: str,
        region: str,
        zone: str,
        tags: Mapping[str, str],
        agent: pulumi.Resource | None,
        storage: EbsCsiDriver | None,
        rule_spec: dict,
        network_policies: list[dict],
        opts: pulumi.ResourceOptions,
    ):
        super().__init__("ray-llm-eks:observability:MonitoringStack", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=observability.NAMESPACE, labels=pod_security.labels(pod_security.MONITORING)
            ),
            opts=child,
        )
        waits_for: list[pulumi.Resource] = [self.namespace]
        if network_policies:  # before any pod of the chart starts (domain/network_policies.py)
            waits_for.append(
                NamespaceNetworkPolicies(
                    f"{name}-network-policies",
                    network_policies,
                    pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]),
                )
            )
        self.workspace: aws.amp.Workspace | None = None
        if obs.mode == "embedded":
            assert storage is not None
            self.volume = PrometheusVolume(
                f"{name}-prometheus-volume",
                obs,
                zone,
                tags,
                self.namespace,
                pulumi.ResourceOptions(parent=self, depends_on=[storage]),
            )
            waits_for.append(self.volume)
            values = observability.stack_values(obs)
        else:
            assert agent is not None
            self.workspace = aws.amp.Workspace(f"{name}-workspace", alias=cluster_name, tags=dict(tags), opts=child)
            role = pod_identity_role(f"{name}-remote-write-role", self)
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
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[agent, policy]),
                )
            )
            # The workspace evaluates the alert rules (an agent evaluates none).
            aws.amp.RuleGroupNamespace(
                f"{name}-rules",
                name=observability.RULE_NAME,
                workspace_id=self.workspace.id,
                data=yaml.safe_dump(rule_spec, sort_keys=False),
                opts=child,
            )
            remote_write = self.workspace.prometheus_endpoint.apply(
                lambda url: f"{url.rstrip('/')}/api/v1/remote_write"
            )
            values = observability.stack_values(obs, remote_write, region)
        self.release = helm_release(
            observability.RELEASE,
            obs.stack_chart,
            observability.NAMESPACE,
            values,
            pulumi.ResourceOptions(parent=self, depends_on=waits_for),
        )
        # Its ServiceMonitor needs the Prometheus Operator's CRDs, which the stack's chart installs.
        self.dcgm = helm_release(
            "dcgm-exporter",
            obs.dcgm_chart,
            observability.NAMESPACE,
            observability.dcgm_values(obs),
            pulumi.ResourceOptions(parent=self, depends_on=[self.release]),
        )
        self.register_outputs({})


class ServiceMonitoring(pulumi.ComponentResource):
    """What watches the RayService, in its namespace: PodMonitors for the head and the workers, the
    alert rule (where Prometheus evaluates it), the dashboards for Grafana's sidecar, and the KubeRay
    operator's ServiceMonitor where this stack installs the operator."""

    def __init__(
        self,
        name: str,
        obs: ObservabilitySettings,
        namespace: str,
        rule_spec: dict,
        dashboards: Mapping[str, str],
        operator_namespace: str | None,
        opts: pulumi.ResourceOptions,
    ):
        super().__init__("ray-llm-eks:observability:ServiceMonitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.monitors = [
            custom_object(f"{name}-{m['metadata']['name']}", m, child)
            for m in observability.pod_monitors(obs, namespace)
        ]
        if operator_namespace is not None:
            custom_object(
                f"{name}-{observability.KUBERAY_MONITOR}",
                observability.kuberay_service_monitor(obs, operator_namespace),
                child,
            )
        if obs.mode != "amp":  # with amp the workspace holds the rules (MonitoringStack)
            self.rule = custom_object(
                f"{name}-{observability.RULE_NAME}", observability.prometheus_rule(obs, namespace, rule_spec), child
            )
        if obs.mode != "amp":  # with amp there is no Grafana of ours to load them
            self.dashboards = [
                k8s.core.v1.ConfigMap(
                    f"{name}-{cm['metadata']['name']}", metadata=_metadata(cm), data=cm["data"], opts=child
                )
                for cm in observability.dashboard_config_maps(namespace, dashboards)
            ]
        self.register_outputs({})
