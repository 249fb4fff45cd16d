"""Where pods land: the labels, taints and tolerations that tie each node pool to its pods, and
the node paths they share."""

from __future__ import annotations

from ray_llm_eks.domain.core.facts import GPU_RESOURCE, POOL_NODE_LABEL

SYSTEM_LABELS = {POOL_NODE_LABEL: "system"}

# Well-known labels every node carries (Kubernetes' well-known labels): its zone and instance type.
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# GPU nodes carry this taint (EKS API spelling of the effect); only pods that tolerate it land there.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "true", "effect": "NO_SCHEDULE"}
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
# What the NVIDIA device plugin chart's default affinity selects.
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}

# nodeadm builds one RAID0 array from all instance-store NVMe, mounts it at /mnt/k8s-disks/0 and
# bind-mounts kubelet, containerd and pod logs onto it (amazon-eks-ami nodeadm API, localStorage).
LOCAL_NVME_ROOT = "/mnt/k8s-disks/0"


def gpu_labels(pool: str) -> dict[str, str]:
    """Labels of a GPU pool's nodes: its name, and `nvidia.com/gpu.present` (what the NVIDIA plugin selects)."""
    return {POOL_NODE_LABEL: pool, **GPU_NODE_SELECTOR}
