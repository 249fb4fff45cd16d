"""The components other Pulumi programs consume through `pulumi package add` (PulumiPlugin.yaml), from
Pulumi YAML, TypeScript, Go, .NET or Java: every box of the README's diagram, from the VPC (Network), the cluster
and its GPU node pools to the PD LLM service, its internal endpoint and monitoring. Each takes plain inputs (its
Args) or other resources' outputs (ids, the kubeconfig, the store's address and AUTH token; a GPU pool the
pulumi-eks cluster and node role, which pulumi-eks itself takes as resources), so a YAML program can wire them as
the shipped program does. Where the shipped program hands a component an object only to wait for it (the Network
to the Cluster, the Pod Identity agent to the autoscaler), a caller gives the component dependsOn instead. The
component provider host (Pulumi SDK 3.272, pulumi/provider/experimental) hosts every ComponentResource class this
module defines and infers the schema from their Args and their annotated outputs (schema.json holds it).

Left out: ExistingCluster, which hands out a provider (a resource, not an output a YAML program can use), and the
pieces behind the boxes (the EBS CSI driver, the Pod Identity agent, ...): a consumer of those uses the Python
package.

The provider constructs a component with its inputs as a dict keyed by the Args' field names
(pulumi/provider/experimental/component.py, map_inputs); each class here turns it into the Args, which
checks it, and registers under `ray-llm-eks:index:<Name>`, the one module the host serves (its
validate_resource_type). The shipped program's components keep their own type tokens."""

import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from typing import Any

import pulumi
from pulumi.errors import InputPropertyError
from pulumi.provider import main
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.experimental.util import camel_case
from pulumi.provider.provider import ConstructResult
from pulumi.provider.server import ComponentInitError

from ray_llm_eks.components import (
    cluster,
    cluster_autoscaler,
    device_plugins,
    gcs_store,
    gpu_nodes,
    kuberay,
    llm_service,
    load_balancer,
    network,
    observability,
)
from ray_llm_eks.components.cluster import ClusterArgs, NodeGroupArgs
from ray_llm_eks.components.cluster_autoscaler import ClusterAutoscalerArgs
from ray_llm_eks.components.device_plugins import DevicePluginsArgs
from ray_llm_eks.components.gcs_store import GcsStoreArgs
from ray_llm_eks.components.gpu_nodes import GpuNodePoolArgs
from ray_llm_eks.components.kuberay import KubeRayOperatorArgs
from ray_llm_eks.components.llm_service import GpuPoolInput, LlmServiceArgs
from ray_llm_eks.components.load_balancer import InternalEndpointArgs
from ray_llm_eks.components.network import NetworkArgs
from ray_llm_eks.components.observability import MonitoringStackArgs, ServiceMonitoringArgs
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.platform.aws_facts import InstanceSpec

PACKAGE = "ray-llm-eks"  # pyproject.toml [project] name; pulumi.run.plugin hosts this module by it
VERSION = "0.1.0"  # pyproject.toml [project] version
SCHEMA_FILE = "schema.json"  # beside this file: the schema the host infers, checked in


# Input types nested in Args: the host hands each as a dict keyed by its field names (component.py
# map_input_properties), which becomes the dataclass here.
NESTED = (GpuPoolInput, NodeGroupArgs, InstanceSpec)


def _args(kind: type, given: Any) -> Any:
    if isinstance(given, kind):
        return given
    # An annotation is a type, or its text in a module with `from __future__ import annotations`: read either by its
    # words, unqualified: `typing.Optional[typing.Sequence[ray_llm_eks...GpuPoolInput]]` names GpuPoolInput.
    words = {
        f.name: {w.rsplit(".", 1)[-1] for w in re.split(r"[^\w.]+", str(f.type))} for f in dataclasses.fields(kind)
    }
    ints = {name for name, names in words.items() if "int" in names}
    nested = {name: t for name, names in words.items() for t in NESTED if t.__name__ in names}

    def value(key: str, given: Any) -> Any:
        if key in nested and isinstance(given, list | tuple):
            return [_args(nested[key], item) for item in given]
        if key in nested and isinstance(given, Mapping):
            return _args(nested[key], given)
        return _whole(given) if key in ints else given

    return kind(**{k: value(k, v) for k, v in dict(given).items()})


def _whole(value: Any) -> Any:
    """An integer input arrives as a float: the engine's wire carries every number as a double
    (google.protobuf.Struct number_value), so YAML's `3600` reaches the provider as 3600.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _hosted(base: type, args_type: type, doc: str) -> type:
    """`base` served as `ray-llm-eks:index:<its name>`: its constructor turns the host's dict into `args_type` (the
    analyzer reads the constructor's `args` annotation for the inputs and `base`'s annotations for the outputs)."""

    def __init__(self, name: str, args: Any, opts: pulumi.ResourceOptions | None = None) -> None:
        base.__init__(self, name, _args(args_type, args), opts)

    __init__.__annotations__ = {"name": str, "args": args_type, "opts": pulumi.ResourceOptions | None, "return": None}
    body = {"TYPE": f"{PACKAGE}:index:{base.__name__}", "__init__": __init__, "__doc__": doc, "__module__": __name__}
    return type(base.__name__, (base,), body)


LlmService = _hosted(
    llm_service.LlmService,
    LlmServiceArgs,
    """The PD LLM service (a RayService, its namespace, Secrets and NetworkPolicies) on a cluster that runs
    the KubeRay operator.""",
)
KubeRayOperator = _hosted(
    kuberay.KubeRayOperator, KubeRayOperatorArgs, """The KubeRay operator from its Helm chart, in kuberay-system."""
)
DevicePlugins = _hosted(
    device_plugins.DevicePlugins, DevicePluginsArgs, """The NVIDIA and AWS EFA device plugins, on GPU nodes."""
)
Network = _hosted(
    network.Network,
    NetworkArgs,
    """The cluster's VPC: public and private subnets in each zone, NAT, and the GPU zone's subnet for EFA nodes.""",
)
GcsStore = _hosted(
    gcs_store.GcsStore,
    GcsStoreArgs,
    """The Ray head's GCS fault-tolerance store: an ElastiCache Valkey replication group in the VPC's private subnets,
    reachable from the head pod's security group alone.""",
)
InternalEndpoint = _hosted(
    load_balancer.InternalEndpoint,
    InternalEndpointArgs,
    """An internal network load balancer in front of the RayService's serve port (the AWS Load Balancer Controller
    makes it).""",
)
ServiceMonitoring = _hosted(
    observability.ServiceMonitoring,
    ServiceMonitoringArgs,
    """PodMonitors, the alert rule and the dashboards of a RayService, for a Prometheus Operator's release.""",
)
Cluster = _hosted(
    cluster.Cluster,
    ClusterArgs,
    """The EKS cluster in the VPC's subnets: API authentication, a restricted public endpoint, control-plane logs
    in a log group of its own, secrets encrypted with its KMS key, the node role and the system node group. Give it
    dependsOn the Network: nodes need the NAT routes to join.""",
)
GpuNodePool = _hosted(
    gpu_nodes.GpuNodePool,
    GpuNodePoolArgs,
    """One GPU pool's managed node group in one subnet (EFA interfaces and a cluster placement group where efa),
    labelled and tainted for the pool named by the resource's name.""",
)
ClusterAutoscaler = _hosted(
    cluster_autoscaler.ClusterAutoscaler,
    ClusterAutoscalerArgs,
    """The Cluster Autoscaler from its Helm chart, its AWS role through EKS Pod Identity: give it dependsOn the
    cluster's Pod Identity agent add-on.""",
)
MonitoringStack = _hosted(
    observability.MonitoringStack,
    MonitoringStackArgs,
    """kube-prometheus-stack and the DCGM exporter: Prometheus on its own EBS volume (embedded: give it dependsOn
    the EBS CSI driver) or remote-writing to an Amazon Managed Service for Prometheus workspace (amp: give it
    dependsOn the cluster's Pod Identity agent add-on).""",
)
HOSTED = (
    LlmService,
    KubeRayOperator,
    DevicePlugins,
    Network,
    GcsStore,
    InternalEndpoint,
    ServiceMonitoring,
    Cluster,
    GpuNodePool,
    ClusterAutoscaler,
    MonitoringStack,
)


class Provider(ComponentProvider):
    """The SDK's component provider, whose refusal of an input is the engine's own: an Args' line reaches the caller
    as a bad property (its path in the schema's names and the one line), where the SDK would report any error of a
    constructor as an unexpected exception with its Python traceback (component.py construct, ComponentInitError)."""

    def construct(self, name: str, resource_type: str, inputs: Any, options: Any = None) -> ConstructResult:
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as err:
            if isinstance(err.inner, ConfigError):
                raise InputPropertyError(schema_path(err.inner.key), str(err.inner)) from None
            raise


def schema_path(args_path: str) -> str:
    """An Args' field path as the schema names it (`gpu_pools.prefill.instance_type` ->
    `gpuPools.prefill.instanceType`): the analyzer's own camelCase of each field."""
    return ".".join(camel_case(part) for part in args_path.split("."))


def hosted_provider() -> Provider:
    return Provider(list(HOSTED), PACKAGE, None, VERSION)


def host() -> None:
    """Serve HOSTED to the engine (the plugin's entry point; pulumi/provider/experimental/host.py does the same with
    the SDK's provider)."""
    main(hosted_provider(), sys.argv[1:])


def schema() -> Mapping[str, Any]:
    """The package schema as the component provider host infers it (the same call it makes at start)."""
    return json.loads(hosted_provider().schema)


def schema_text() -> str:
    """schema.json's text (`make docs` writes it)."""
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"
