"""Karpenter's objects for the GPU pools, as plain manifests: one NodePool per pool (the nodes our
Ray worker pods select and tolerate) and, on AWS, one EC2NodeClass per pool (how those nodes boot:
pinned AMI, RAID0 instance store, EFA interfaces, placement group). Field names and rules are those
of the pinned Karpenter's CRDs (offline/schemas/karpenter.*.v1.14.1.yaml).

The NodePool takes its node class as a reference, so the same pool runs on EC2 (EC2NodeClass) or
on Karpenter's kwok provider (KWOKNodeClass), which stands in for EC2 where no AWS is reachable, or
under EKS Auto Mode (its NodeClass, eks.amazonaws.com/v1: auto_mode_node_class)."""

from __future__ import annotations

from dataclasses import dataclass

from ray_llm_eks.domain.cluster.node_provisioning import NodeProvisioning
from ray_llm_eks.domain.core.facts import GPU_RESOURCE
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.placement import GPU_TAINT, INSTANCE_TYPE_LABEL, ZONE_LABEL, gpu_labels
from ray_llm_eks.domain.stack.settings import GpuPoolSettings

NODE_POOL_API = "karpenter.sh/v1"
EC2_NODE_CLASS_API = "karpenter.k8s.aws/v1"
# EKS Auto Mode's node class (EKS user guide create-node-class; its NodePools are karpenter.sh/v1 and
# reference it with group eks.amazonaws.com, kind NodeClass: create-node-pool).
AUTO_MODE_NODE_CLASS_API = "eks.amazonaws.com/v1"

# Karpenter never voluntarily disrupts a node running a pod with this annotation (consolidation,
# drift; sigs.k8s.io/karpenter pkg/apis/v1/labels.go DoNotDisruptAnnotationKey): a serving replica
# is never cut off mid-request; its node goes once Ray has removed the idle worker.
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}

# The label of a node's capacity type (sigs.k8s.io/karpenter pkg/apis/v1/labels.go CapacityTypeLabelKey).
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ON_DEMAND, SPOT = "on-demand", "spot"

# An empty GPU node waits this long before Karpenter removes it: the Cluster Autoscaler's default
# --scale-down-unneeded-time (10m), which the managed node groups scale down with.
CONSOLIDATE_AFTER = "10m"
# At most one node of a pool is being removed at a time (the CRD's default budget is 10% of the pool).
DISRUPTION_BUDGETS = [{"nodes": "1"}]
# Nodes never expire on a timer (the CRD's default is 720h): like a managed node group, a pool's nodes
# change when the stack's AMI pin does (Karpenter replaces drifted nodes once their pods are gone).
EXPIRE_AFTER = "Never"
# Auto Mode allows no "Never": its EC2 managed instances live at most 21 days (EKS user guide
# auto-security.adoc), so its NodePools say so rather than leave AWS's shorter default.
AUTO_MODE_EXPIRE_AFTER = f"{21 * 24}h"

# The root volume of AL2023 (Karpenter's default mapping for the family is 20Gi on /dev/xvda:
# website docs/concepts/nodeclasses.md, spec.blockDeviceMappings); the pool's disk size instead.
ROOT_DEVICE = "/dev/xvda"
# IMDSv2 only, one hop: pods cannot reach the node's instance credentials (the CRD's defaults, stated).
METADATA_OPTIONS = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}


@dataclass(frozen=True)
class NodeClassRef:
    """What a NodePool's nodes are made from: the node class object's API group, kind and name."""

    group: str
    kind: str
    name: str

    def manifest(self) -> dict[str, str]:
        return {"group": self.group, "kind": self.kind, "name": self.name}


def ec2_node_class_ref(pool: GpuPoolSettings) -> NodeClassRef:
    """The EC2NodeClass of this pool (ec2_node_class builds it under the pool's name)."""
    return NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", pool.name)


def auto_mode_node_class_ref(pool: GpuPoolSettings) -> NodeClassRef:
    """The Auto Mode NodeClass of this pool (auto_mode_node_class builds it under the pool's name)."""
    return NodeClassRef("eks.amazonaws.com", "NodeClass", pool.name)


def fitting_instance_types(pool: GpuPoolSettings) -> list[str]:
    """Instance types a node of this pool may be: the pool's own, and every type in our instance table
    with the same GPUs (model and count) and network cards, at least its vCPUs, memory and instance
    store (the worker pod is sized to the pool's type and asks for all its GPUs and EFA devices);
    EFA-capable where the pool's role moves the KV cache over EFA."""
    own = pool.spec
    return sorted(
        # A type the stack describes itself (instanceTypes) is not in the table: itself.
        ({pool.nodes.instance_type} - set(aws_facts.INSTANCE_SPECS))
        | {
            name
            for name, spec in aws_facts.INSTANCE_SPECS.items()
            if spec.gpu_model == own.gpu_model
            and spec.gpus == own.gpus
            and spec.network_cards == own.network_cards
            and spec.vcpus >= own.vcpus
            and spec.memory_gib >= own.memory_gib
            and spec.nvme_gb >= own.nvme_gb
            and (spec.efa or not pool.efa)
        }
    )


def pool_instance_types(pool: GpuPoolSettings, provisioning: NodeProvisioning) -> list[str]:
    """What a node of this pool may be: its instance type, or with NodePools (Karpenter, Auto Mode) every
    type that fits it."""
    return fitting_instance_types(pool) if provisioning.by_node_pools else [pool.nodes.instance_type]


def capacity_types(spot: bool) -> list[str]:
    """On-demand only, unless spot is allowed (then Karpenter prefers spot, and falls back to on-demand)."""
    return [SPOT, ON_DEMAND] if spot else [ON_DEMAND]


def node_pool(
    pool: GpuPoolSettings, node_class_ref: NodeClassRef, spot: bool = False, expire_after: str = EXPIRE_AFTER
) -> dict:
    """The NodePool of one GPU pool: nodes with the pool's label and the GPU taint (what its Ray worker
    pods select and tolerate), of the instance types that fit it, in its zone, at most as many GPUs as
    the pool's maxSize holds; empty nodes are removed, busy ones never (DO_NOT_DISRUPT on the pods)."""
    requirements = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": fitting_instance_types(pool)},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": capacity_types(spot)},
        {"key": ZONE_LABEL, "operator": "In", "values": [pool.availability_zone]},
    ]
    taint = {"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NoSchedule"}
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            "template": {
                "metadata": {"labels": gpu_labels(pool.name)},
                "spec": {
                    "nodeClassRef": node_class_ref.manifest(),
                    "requirements": requirements,
                    "taints": [taint],
                    "expireAfter": expire_after,
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": CONSOLIDATE_AFTER,
                "budgets": DISRUPTION_BUDGETS,
            },
            # The pool's bounds: a fitting type has the pool's GPU count, so this caps nodes at maxSize.
            "limits": {GPU_RESOURCE: str(pool.nodes.max_size * pool.spec.gpus)},
        },
    }


def network_interfaces(spec: aws_facts.InstanceSpec) -> list[dict]:
    """The primary ENA interface on card 0, and one EFA-only interface per network card (device 1 on
    card 0, beside the primary). Karpenter counts the EFA-only ones as the node's
    vpc.amazonaws.com/efa (pkg/providers/instancetype/types.go efas): what the worker pod asks for."""
    primary = {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    efa = [
        {"networkCardIndex": card, "deviceIndex": 1 if card == 0 else 0, "interfaceType": "efa-only"}
        for card in range(spec.network_cards)
    ]
    return [primary, *efa]


def ami_selector(pool: GpuPoolSettings) -> dict:
    """The pinned AMI: an exact id, or the AL2023 alias at the pinned release, which Karpenter resolves
    through the same SSM parameter as the node groups' (amifamily/al2023.go resolvePath: the nvidia
    variant for GPU types); never `latest`."""
    if pool.ami.ami_id is not None:
        return {"amiFamily": "AL2023", "amiSelectorTerms": [{"id": pool.ami.ami_id}]}
    return {"amiSelectorTerms": [{"alias": f"al2023@{pool.ami.release_version}"}]}


def ec2_node_class(
    pool: GpuPoolSettings,
    *,
    node_role: str | None,
    subnet_tags: dict[str, str],
    security_group_tags: dict[str, str],
    placement_group: str | None,
) -> dict:
    """The EC2NodeClass of one GPU pool: the pinned AL2023 NVIDIA AMI, instance store as one RAID0
    array (nodeadm mounts it where the model cache lives, ray_llm_eks/domain/platform/placement.py LOCAL_NVME_ROOT), the
    pool's root volume, and on EFA pools one EFA interface per network card in the pool's cluster
    placement group. Subnets and security groups are selected by their tags. `node_role`: the IAM role
    its nodes get; None leaves it to the component that creates the role (ray_llm_eks/components/karpenter.py)."""
    spec: dict = {
        **ami_selector(pool),
        "subnetSelectorTerms": [{"tags": dict(subnet_tags)}],
        "securityGroupSelectorTerms": [{"tags": dict(security_group_tags)}],
        "instanceStorePolicy": "RAID0",
        "blockDeviceMappings": [
            {
                "deviceName": ROOT_DEVICE,
                "rootVolume": True,
                "ebs": {"volumeSize": f"{pool.nodes.disk_size_gib}Gi", "volumeType": "gp3", "encrypted": True},
            }
        ],
        "metadataOptions": dict(METADATA_OPTIONS),
    }
    if node_role is not None:
        spec["role"] = node_role
    if pool.efa:
        spec["networkInterfaces"] = network_interfaces(pool.spec)
    if placement_group is not None:
        spec["placementGroupSelector"] = {"name": placement_group}
    return {
        "apiVersion": EC2_NODE_CLASS_API,
        "kind": "EC2NodeClass",
        "metadata": {"name": ec2_node_class_ref(pool).name},
        "spec": spec,
    }


def auto_mode_node_class(
    pool: GpuPoolSettings, *, node_role: str | None, subnet_tags: dict[str, str], security_group_tags: dict[str, str]
) -> dict:
    """The Auto Mode NodeClass of one GPU pool: the subnet and security group selectors of its EC2NodeClass,
    and the pool's disk as the node's ephemeral storage (Auto Mode's default is 80Gi: create-node-class).
    What the EC2NodeClass sets besides has no field here (AMI, instance store RAID0, metadata options, EFA
    interfaces, placement group): ray_llm_eks/domain/cluster/node_provisioning.py AUTO_MODE_LIMITS and AUTO_MODE_NO_PD.
    `node_role`: None leaves it to the component (Auto Mode's node role, ray_llm_eks/components/auto_mode.py)."""
    if pool.efa:
        raise ValueError(f"GPU pool {pool.name} needs EFA, which an Auto Mode NodeClass cannot give its nodes")
    spec: dict = {
        "subnetSelectorTerms": [{"tags": dict(subnet_tags)}],
        "securityGroupSelectorTerms": [{"tags": dict(security_group_tags)}],
        "ephemeralStorage": {"size": f"{pool.nodes.disk_size_gib}Gi"},
    }
    if node_role is not None:
        spec["role"] = node_role
    return {
        "apiVersion": AUTO_MODE_NODE_CLASS_API,
        "kind": "NodeClass",
        "metadata": {"name": auto_mode_node_class_ref(pool).name},
        "spec": spec,
    }
