"""The stack's settings as the components' Args: the one place that reads the composite Settings for
them (ray_llm_eks/domain/stack/settings.py), so every component takes only its own typed Args."""

from __future__ import annotations

import pulumi

from ray_llm_eks.components.auto_mode import AutoModeNodePoolsArgs
from ray_llm_eks.components.cluster import Cluster, ClusterArgs, NodeGroupArgs
from ray_llm_eks.components.cluster_autoscaler import ClusterAutoscalerArgs
from ray_llm_eks.components.device_plugins import DevicePluginsArgs
from ray_llm_eks.components.existing_cluster import ExistingClusterArgs
from ray_llm_eks.components.gcs_store import GcsStore, GcsStoreArgs
from ray_llm_eks.components.gpu_nodes import GpuNodePoolArgs
from ray_llm_eks.components.karpenter import KarpenterArgs
from ray_llm_eks.components.kuberay import KubeRayOperatorArgs
from ray_llm_eks.components.llm_service import LlmServiceArgs
from ray_llm_eks.components.load_balancer import InternalEndpointArgs, LoadBalancerControllerArgs
from ray_llm_eks.components.network import Network, NetworkArgs
from ray_llm_eks.components.observability import EbsCsiDriverArgs, MonitoringStackArgs, ServiceMonitoringArgs
from ray_llm_eks.domain.cluster import gcs_ft
from ray_llm_eks.domain.core.facts import ENVIRONMENT_TAG
from ray_llm_eks.domain.platform import teardown
from ray_llm_eks.domain.platform.subnets import private_subnet_name
from ray_llm_eks.domain.platform.versions import EBS_CSI_ADDON, POD_IDENTITY_AGENT_ADDON
from ray_llm_eks.domain.render import alert_rules, dashboards, karpenter
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from ray_llm_eks.domain.security import network_policies as policies
from ray_llm_eks.domain.security.network_policies import network_policies
from ray_llm_eks.domain.serving.api_keys import SHIPPED_MODULES
from ray_llm_eks.domain.stack.settings import GpuPoolSettings, NodePoolSettings, Settings


def llm_service_args(
    settings: Settings,
    hf_token: pulumi.Output[str] | None,
    api_keys: pulumi.Output[str] | None,
    store: GcsStore | None,
    head_security_groups: list[pulumi.Input[str]],
    sealed: frozenset[str] = frozenset(),
    ray_auth_token: pulumi.Output[str] | None = None,
) -> LlmServiceArgs:
    serving, mode, hardening = settings.serving, settings.deploy_mode, settings.hardening
    return LlmServiceArgs(
        ray_service_spec=ray_service_spec(settings),  # the store's address is a placeholder until AWS names it
        model_id=serving.serve_document.model_id,
        namespace=serving.namespace,
        service_name=serving.service_name,
        environment=hardening.environment,
        api_key_check=hardening.api_key_check,
        ingress_modules=SHIPPED_MODULES,
        network_policies=(
            network_policies(
                serving.namespace,
                hardening,
                mode.operator_namespace,
                serving.observability,
            )
            if hardening.network_policies
            else ()
        ),
        wait_for_ready=mode.wait_for_ready,
        ready_timeout_seconds=serving.ready_timeout_seconds,
        hf_token=hf_token,
        api_keys=api_keys,
        ray_auth_token=ray_auth_token if settings.ray_auth_token_set else None,
        redis_address=store.address if store else None,
        redis_password=store.password if store else None,
        head_security_group_ids=head_security_groups if store else (),
        sealed_secrets=sorted(key for key in ("hfToken", "apiKeys", "rayAuthToken") if key in sealed),
    )


def existing_cluster_args(
    settings: Settings, kubeconfig: pulumi.Output[str] | None, offline_plan: bool, sealed: bool
) -> ExistingClusterArgs:
    """`offline_plan`: the plan runs without deploying; `sealed`: the kubeconfig is a `secure:` value."""
    mode = settings.deploy_mode
    return ExistingClusterArgs(
        ray_service_spec=ray_service_spec(settings),  # the spec that deploys, keyed
        pools=list(settings.gpu_pools),
        kubeconfig=kubeconfig,
        kube_context=mode.kube_context,
        install_kuberay=mode.install_kuberay,
        install_device_plugins=mode.install_device_plugins,
        kuberay_namespace=mode.kuberay_namespace,  # as the stack sets it: a typo would lock the operator out
        monitoring_crds=settings.serving.observability.mode == "external",
        offline_plan=offline_plan,
        kubeconfig_sealed=sealed,
    )


def kuberay_args(settings: Settings) -> KubeRayOperatorArgs:
    return KubeRayOperatorArgs(
        chart_version=settings.serving.kuberay.version, feature_gates=gcs_ft.operator_feature_gates(settings.gcs_ft)
    )


def device_plugins_args(settings: Settings) -> DevicePluginsArgs:
    serving, provisioning = settings.serving, settings.node_provisioning
    return DevicePluginsArgs(
        nvidia_chart_version=serving.nvidia_plugin.version,
        efa_chart_version=serving.efa_plugin.version,
        efa_instance_types=sorted(
            {t for p in settings.gpu_pools.values() if p.efa for t in karpenter.pool_instance_types(p, provisioning)}
        ),
        efa_image_repository=serving.efa_plugin_image,
    )


def network_args(settings: Settings) -> NetworkArgs:
    network = settings.network
    return NetworkArgs(
        cluster_name=network.cluster_name,
        region=settings.region,
        availability_zones=network.availability_zones,
        gpu_availability_zone=network.gpu_availability_zone,
        vpc_cidr=network.vpc_cidr,
        nat_gateways=network.nat_gateways,
    )


def node_group_args(nodes: NodePoolSettings) -> NodeGroupArgs:
    return NodeGroupArgs(
        instance_type=nodes.instance_type,
        min_size=nodes.min_size,
        desired_size=nodes.desired_size,
        max_size=nodes.max_size,
        disk_size_gib=nodes.disk_size_gib,
    )


def cluster_args(settings: Settings, network: Network) -> ClusterArgs:
    cluster = settings.cluster
    return ClusterArgs(
        name=cluster.name,
        region=settings.region,
        vpc_id=network.vpc_id,
        private_subnet_ids=network.private_subnet_ids,
        public_subnet_ids=network.public_subnet_ids,
        system_subnet_id=network.gpu_subnet_id,
        kubernetes_version=cluster.kubernetes_version,
        admin_principal_arns=cluster.admin_principal_arns,
        public_access_cidrs=cluster.public_access_cidrs,
        service_cidr=cluster.service_cidr,
        log_types=cluster.log_types,
        log_retention_days=cluster.log_retention_days,
        system_nodes=node_group_args(cluster.system_nodes),
        environment=settings.hardening.environment,
        network_policies=settings.hardening.network_policies,
        pod_security_groups=settings.gcs_ft.redis,  # the GCS store admits the Ray head's group only
        **({"auto_mode": True} if settings.node_provisioning.by_auto_mode else {}),
        keep_data=teardown.keeps_data(settings.hardening.environment),
        addon_versions=dict(cluster.addon_versions),
    )


def pod_identity_agent_version(settings: Settings) -> str | None:
    """The Pod Identity agent add-on's kept version (config key eksAddonVersions); None: EKS's default at deploy."""
    return dict(settings.cluster.addon_versions).get(POD_IDENTITY_AGENT_ADDON)


def gpu_node_pool_args(pool: GpuPoolSettings, cluster: Cluster, network: Network) -> GpuNodePoolArgs:
    return GpuNodePoolArgs(
        nodes=node_group_args(pool.nodes),
        availability_zone=pool.availability_zone,
        cluster=cluster.eks_cluster,
        node_role=cluster.node_role,
        subnet_id=network.gpu_subnet_id,
        kubernetes_version=pool.kubernetes_version,
        ami_release_version=pool.ami.release_version,
        ami_id=pool.ami.ami_id,
        efa=pool.efa,
        instance=pool.spec,
    )


def cluster_autoscaler_args(settings: Settings) -> ClusterAutoscalerArgs:
    return ClusterAutoscalerArgs(
        cluster_name=settings.cluster.name,
        region=settings.region,
        kubernetes_version=settings.cluster.kubernetes_version,
        chart_version=settings.serving.cluster_autoscaler.version,
    )


def internal_endpoint_args(settings: Settings) -> InternalEndpointArgs:
    hardening = settings.hardening
    return InternalEndpointArgs(
        source_ranges=hardening.endpoint_source_ranges,
        namespace=settings.serving.namespace,
        service_name=settings.serving.service_name,
        subnets=[name for name, _ in hardening.load_balancer_subnets],
        pod_subnets=hardening.pod_subnets,
        certificate_arn=hardening.endpoint_certificate_arn,
    )


def gcs_store_args(settings: Settings, network: Network) -> GcsStoreArgs:
    ft = settings.gcs_ft
    return GcsStoreArgs(
        cluster_name=settings.cluster.name,
        vpc_id=network.vpc_id,
        private_subnet_ids=network.private_subnet_ids,
        node_type=ft.redis_node_type,
        replicas=ft.redis_replicas,
        keep_data=teardown.keeps_data(settings.hardening.environment),
    )


def ebs_csi_driver_args(settings: Settings) -> EbsCsiDriverArgs:
    cluster = settings.cluster
    return EbsCsiDriverArgs(
        cluster_name=cluster.name,
        region=settings.region,
        kubernetes_version=cluster.kubernetes_version,
        addon_version=dict(cluster.addon_versions).get(EBS_CSI_ADDON),
    )


def monitoring_stack_args(settings: Settings, zone: str) -> MonitoringStackArgs:
    """`zone`: the system nodes' (Network's GPU zone)."""
    obs, name, hardening = settings.serving.observability, settings.cluster.name, settings.hardening
    return MonitoringStackArgs(
        cluster_name=name,
        region=settings.region,
        availability_zone=zone,
        mode=obs.mode,
        retention_days=obs.retention_days,
        storage_gib=obs.storage_gib,
        grafana_anonymous=obs.grafana_anonymous,
        stack_chart_version=obs.stack_chart.version,
        dcgm_chart_version=obs.dcgm_chart.version,
        tags={"Name": f"{name}-prometheus", ENVIRONMENT_TAG: hardening.environment},
        # Only amp's workspace evaluates rules here; embedded Prometheus takes them from ServiceMonitoring.
        rule_spec=alert_rules.prometheus_rule_spec(settings) if obs.mode == "amp" else None,
        network_policies=(
            policies.monitoring_policies(obs, settings.serving.namespace) if hardening.network_policies else ()
        ),
        keep_data=teardown.keeps_data(hardening.environment),
    )


def service_monitoring_args(settings: Settings) -> ServiceMonitoringArgs:
    obs, mode = settings.serving.observability, settings.deploy_mode
    # With amp the workspace holds the rules (MonitoringStack) and there is no Grafana of ours to load dashboards.
    amp = obs.mode == "amp"
    return ServiceMonitoringArgs(
        namespace=settings.serving.namespace,
        prometheus_release=obs.prometheus_release,
        rule_spec=None if amp else alert_rules.prometheus_rule_spec(settings),
        dashboards=None if amp else dashboards.shipped_dashboards(settings),
        operator_namespace=mode.operator_namespace if mode.install_kuberay else None,
    )


def load_balancer_controller_args(settings: Settings, network: Network) -> LoadBalancerControllerArgs:
    return LoadBalancerControllerArgs(
        cluster_name=settings.cluster.name,
        region=settings.region,
        vpc_id=network.vpc_id,
        chart_version=settings.serving.lb_controller.version,
    )


# EKS tags the cluster security group it creates (the one its managed nodes get) with this key; an
# `aws:` key no one else can set, so the selector finds that group and no other.
CLUSTER_SECURITY_GROUP_TAG = "aws:eks:cluster-name"


def placement_group_name(cluster_name: str, pool: str) -> str:
    return f"{cluster_name}-{pool}"


def gpu_node_selectors(settings: Settings) -> dict[str, dict[str, str]]:
    """The subnet and security group tags a GPU pool's node class selects (Karpenter's or Auto Mode's):
    the GPU zone's private subnet and the cluster security group."""
    cluster = settings.cluster
    return {
        "subnet_tags": {"Name": private_subnet_name(cluster.name, settings.network.gpu_availability_zone)},
        "security_group_tags": {CLUSTER_SECURITY_GROUP_TAG: cluster.name},
    }


def auto_mode_args(settings: Settings) -> AutoModeNodePoolsArgs:
    """One NodePool and one Auto Mode NodeClass per GPU pool, selecting what Karpenter's would; on-demand
    (prefillSpot is Karpenter's), nodes expiring at Auto Mode's 21-day limit."""
    pools = settings.gpu_pools.values()
    return AutoModeNodePoolsArgs(
        node_pools=[
            karpenter.node_pool(
                pool, karpenter.auto_mode_node_class_ref(pool), expire_after=karpenter.AUTO_MODE_EXPIRE_AFTER
            )
            for pool in pools
        ],
        node_classes=[
            karpenter.auto_mode_node_class(pool, node_role=None, **gpu_node_selectors(settings)) for pool in pools
        ],
    )


def karpenter_args(settings: Settings) -> KarpenterArgs:
    """One NodePool and one EC2NodeClass per GPU pool, in the GPU zone's private subnet with the cluster
    security group; EFA pools in a placement group of their own."""
    cluster, provisioning = settings.cluster, settings.node_provisioning
    groups = {name: placement_group_name(cluster.name, name) for name, pool in settings.gpu_pools.items() if pool.efa}
    pools = settings.gpu_pools.values()
    return KarpenterArgs(
        cluster_name=cluster.name,
        region=settings.region,
        node_pools=[
            karpenter.node_pool(
                pool,
                karpenter.ec2_node_class_ref(pool),
                spot=provisioning.spot(pool.app_role),
            )
            for pool in pools
        ],
        node_classes=[
            karpenter.ec2_node_class(
                pool,
                node_role=None,
                placement_group=groups.get(pool.name),
                **gpu_node_selectors(settings),
            )
            for pool in pools
        ],
        placement_groups=sorted(groups.values()),
        # The controller's pods repel each other (chart affinity): no more than the system nodes always there.
        replicas=min(2, cluster.system_nodes.min_size),
        chart_version=provisioning.karpenter.version,
    )
