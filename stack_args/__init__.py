"""The stack's settings as the components' Args: the one place that reads the composite Settings for
them (domain/settings.py), so every component takes only its own typed Args."""

from __future__ import annotations

import pulumi

from components.cluster_autoscaler import ClusterAutoscalerArgs
from components.device_plugins import DevicePluginsArgs
from components.gcs_store import GcsStore, GcsStoreArgs
from components.kuberay import KubeRayOperatorArgs
from components.llm_service import LlmServiceArgs
from components.load_balancer import InternalEndpointArgs, LoadBalancerControllerArgs
from components.network import Network, NetworkArgs
from components.observability import EbsCsiDriverArgs, MonitoringStackArgs, ServiceMonitoringArgs
from domain import alerts, dashboards, gcs_ft
from domain import network_policies as policies
from domain.deploy_mode import DeployMode
from domain.facts import ENVIRONMENT_TAG
from domain.hardening import HardeningSettings
from domain.network_policies import network_policies
from domain.ray_service import ray_service_spec
from domain.serve_config import served_model_id
from domain.settings import Settings


def llm_service_args(
    settings: Settings,
    mode: DeployMode,
    hardening: HardeningSettings,
    hf_token: pulumi.Output[str] | None,
    api_keys: pulumi.Output[str] | None,
    store: GcsStore | None,
    head_security_groups: list[pulumi.Input[str]],
    sealed: frozenset[str] = frozenset(),
) -> LlmServiceArgs:
    """`hardening`: the stack's, as this deploy mode applies it (no internal endpoint on an existing cluster)."""
    serving = settings.serving
    return LlmServiceArgs(
        ray_service_spec=ray_service_spec(settings),  # the store's address is a placeholder until AWS names it
        model_id=served_model_id(serving.serve_document, "rendered"),
        namespace=serving.namespace,
        service_name=serving.service_name,
        environment=settings.hardening.environment,
        api_key_check=settings.hardening.api_key_check,
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
        redis_address=store.address if store else None,
        redis_password=store.password if store else None,
        head_security_group_ids=head_security_groups if store else (),
        sealed_secrets=sorted(key for key in ("hfToken", "apiKeys") if key in sealed),
    )


def kuberay_args(settings: Settings) -> KubeRayOperatorArgs:
    return KubeRayOperatorArgs(
        chart_version=settings.serving.kuberay.version, feature_gates=gcs_ft.operator_feature_gates(settings.gcs_ft)
    )


def device_plugins_args(settings: Settings) -> DevicePluginsArgs:
    serving = settings.serving
    return DevicePluginsArgs(
        nvidia_chart_version=serving.nvidia_plugin.version,
        efa_chart_version=serving.efa_plugin.version,
        efa_instance_types=sorted({p.nodes.instance_type for p in settings.gpu_pools.values() if p.efa}),
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


def cluster_autoscaler_args(settings: Settings) -> ClusterAutoscalerArgs:
    return ClusterAutoscalerArgs(
        cluster_name=settings.cluster.name,
        region=settings.region,
        kubernetes_version=settings.cluster.kubernetes_version,
        chart_version=settings.serving.cluster_autoscaler.version,
    )


def internal_endpoint_args(settings: Settings, hardening: HardeningSettings) -> InternalEndpointArgs:
    """`hardening`: the stack's, as this deploy mode applies it."""
    return InternalEndpointArgs(
        source_ranges=hardening.endpoint_source_ranges,
        namespace=settings.serving.namespace,
        service_name=settings.serving.service_name,
        subnets=[name for name, _ in hardening.load_balancer_subnets],
    )


def gcs_store_args(settings: Settings, network: Network) -> GcsStoreArgs:
    ft = settings.gcs_ft
    return GcsStoreArgs(
        cluster_name=settings.cluster.name,
        vpc_id=network.vpc.id,
        private_subnet_ids=network.private_subnet_ids,
        node_type=ft.redis_node_type,
        replicas=ft.redis_replicas,
    )


def ebs_csi_driver_args(settings: Settings) -> EbsCsiDriverArgs:
    cluster = settings.cluster
    return EbsCsiDriverArgs(
        cluster_name=cluster.name, region=settings.region, kubernetes_version=cluster.kubernetes_version
    )


def monitoring_stack_args(settings: Settings, hardening: HardeningSettings, zone: str) -> MonitoringStackArgs:
    """`hardening`: the stack's, as this deploy mode applies it; `zone`: the system nodes' (Network's GPU zone)."""
    obs, name = settings.serving.observability, settings.cluster.name
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
        rule_spec=alerts.prometheus_rule_spec(settings) if obs.mode == "amp" else None,
        network_policies=(
            policies.monitoring_policies(obs, settings.serving.namespace) if hardening.network_policies else ()
        ),
    )


def service_monitoring_args(settings: Settings, mode: DeployMode) -> ServiceMonitoringArgs:
    obs = settings.serving.observability
    # With amp the workspace holds the rules (MonitoringStack) and there is no Grafana of ours to load dashboards.
    amp = obs.mode == "amp"
    return ServiceMonitoringArgs(
        namespace=settings.serving.namespace,
        prometheus_release=obs.prometheus_release,
        rule_spec=None if amp else alerts.prometheus_rule_spec(settings),
        dashboards=None if amp else dashboards.shipped_dashboards(settings, existing_cluster=mode.existing_cluster),
        operator_namespace=mode.operator_namespace if mode.install_kuberay else None,
    )


def load_balancer_controller_args(settings: Settings, network: Network) -> LoadBalancerControllerArgs:
    return LoadBalancerControllerArgs(
        cluster_name=settings.cluster.name,
        region=settings.region,
        vpc_id=network.vpc.id,
        chart_version=settings.serving.lb_controller.version,
    )
