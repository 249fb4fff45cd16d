"""The node the Cluster Autoscaler would ask for: what its AWS provider imagines for an Auto Scaling
group that has no instance to copy, built only from the group's instance type and its node-template
tags. The e2e registers it as if the autoscaler had launched it, so the real scheduler shows
whether a pending pod of that pool would fit there, and why not.

Follows cluster-autoscaler 1.35.2 cloudprovider/aws/aws_manager.go: buildNodeFromTemplate (capacity
from the instance type, `resources/` tags override it, allocatable = capacity), buildGenericLabels,
extractLabelsFromAsg, extractTaintsFromAsg, extractAllocatableResourcesFromAsg. Not modelled: the
mixed-instances override, and the EKS managed-node-group path (when the ASG carries EKS's
`eks:nodegroup-name` tag the autoscaler also asks EKS DescribeNodegroup for labels and taints): that
needs AWS, and it never supplies `vpc.amazonaws.com/efa`, which only our tags do.

The capacity comes from our instance table, standing in for the autoscaler's own
(ec2_instance_types.go InstanceTypes), which cannot be read here: the Go module proxy does not serve
k8s.io/autoscaler/cluster-autoscaler. Both agreed on every type we list at 1.35.2
(tools/check_autoscaler_instance_types.py re-checks it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ray_llm_eks.domain.fit.scaling import NODE_TEMPLATE
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.cluster_checks import parse_quantity

_LABEL, _TAINT, _RESOURCE = f"{NODE_TEMPLATE}/label/", f"{NODE_TEMPLATE}/taint/", f"{NODE_TEMPLATE}/resources/"
# extractTaintsFromAsg: a value without `:<Effect>` is ignored (an unanchored match, then split at the first `:`).
_TAINT_VALUE = re.compile(r"(.*):(?:NoSchedule|NoExecute|PreferNoSchedule)")
TEMPLATE_PODS = 110  # buildNodeFromTemplate: "TODO: get a real value."
ARCH = "amd64"  # the autoscaler's instance table; every type in ours is x86_64
CAPACITY_SOURCE = (
    "capacity from ray_llm_eks/domain/platform/aws_facts.py INSTANCE_SPECS, standing in for cluster-autoscaler "
    "1.35.2's "
    "ec2_instance_types.go (equal for every type we list; tools/check_autoscaler_instance_types.py)"
)


def _quantity_or_none(value: str) -> str | None:
    """A tag value the autoscaler would parse as a quantity (resource.ParseQuantity); others it skips."""
    try:
        parse_quantity(value)
    except ValueError:
        return None
    return value


def template_node(name: str, instance_type: str, tags: Mapping[str, str], region: str, zone: str) -> dict:
    """A Node (with status) as the Cluster Autoscaler builds it for a scale-up from zero: capacity of
    the instance type (vCPUs, memory, GPUs, 110 pods), then the `resources/` tags; labels from
    `label/` tags; taints from `taint/` tags. Nothing else of the pool is known to it."""
    spec = aws_facts.INSTANCE_SPECS.get(instance_type)
    if spec is None:
        raise ValueError(f"{instance_type}: not in ray_llm_eks/domain/platform/aws_facts.py INSTANCE_SPECS")
    capacity = {
        "pods": str(TEMPLATE_PODS),
        "cpu": str(spec.vcpus),
        "nvidia.com/gpu": str(spec.gpus),
        "memory": str(spec.memory_gib * 1024 * 1024 * 1024),  # MemoryMb * 1024 * 1024
    }
    labels = {
        "kubernetes.io/arch": ARCH,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
        "topology.ebs.csi.aws.com/zone": zone,
        "kubernetes.io/hostname": name,
    }
    taints = []
    for key, value in tags.items():
        if key.startswith(_RESOURCE) and key != _RESOURCE and _quantity_or_none(value) is not None:
            capacity[key.removeprefix(_RESOURCE)] = value
        elif key.startswith(_LABEL) and key != _LABEL:
            labels[key.removeprefix(_LABEL)] = value
        elif key.startswith(_TAINT) and _TAINT_VALUE.search(value):
            taint_value, effect = value.split(":", 1)
            taints.append({"key": key.removeprefix(_TAINT), "value": taint_value, "effect": effect})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
