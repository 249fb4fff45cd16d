"""ray-llm-eks: wiring only. Every box is a component in components/; see README for the picture."""

import pulumi

from components.cluster import Cluster
from components.config import load_stack_settings
from components.gpu_nodes import GpuNodePool
from components.network import Network

settings = load_stack_settings()  # typed and validated: a bad value stops here, before any resource

network = Network("net", settings.network, settings.region)
cluster = Cluster("eks", settings.cluster, network, settings.region)
pools = {role: GpuNodePool(role, pool, cluster, network) for role, pool in settings.gpu_pools.items()}

pulumi.export("region", settings.region)
pulumi.export("clusterName", cluster.name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("gpuAvailabilityZone", network.gpu_availability_zone)
pulumi.export("gpuSubnetId", network.gpu_subnet_id)
pulumi.export("systemNodeGroupName", cluster.system_nodes.node_group.node_group_name)
pulumi.export("gpuNodeGroupNames", {role: pool.node_group_name for role, pool in pools.items()})
