"""How much of a node a pod may ask for: the arithmetic behind the Ray containers' requests.

capacity    = the instance's memory less what the hypervisor and kernel keep (not all of it reaches kubelet)
allocatable = capacity - kube-reserved - eviction threshold (what nodeadm configures on AL2023),
and a Ray pod gets what is left after the DaemonSets that run on the same node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ray_llm_eks.domain.platform.aws_facts import InstanceSpec

# awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go: evictionHard memory.available=100Mi;
# kube-reserved memory 11*maxPods+255 MiB; CPU 6% of the 1st core, 1% of the 2nd, 0.5% of the 3rd
# and 4th, 0.25% of every core above 4. No system-reserved.
EVICTION_HARD_MIB = 100
# Kubelet sees less memory than the instance is sold with; Karpenter budgets 7.5% for it
# (vmMemoryOverheadPercent default 0.075), which we follow so a worker never stays Pending.
VM_MEMORY_OVERHEAD = 0.075
_CPU_BANDS = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, 10**9, 25))  # per 10,000


@dataclass(frozen=True)
class Resources:
    cpu_m: int
    memory_mib: int

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.memory_mib - other.memory_mib)

    def fits_in(self, other: Resources) -> bool:
        return self.cpu_m <= other.cpu_m and self.memory_mib <= other.memory_mib

    def as_k8s(self) -> dict[str, str]:
        return {"cpu": f"{self.cpu_m}m", "memory": f"{self.memory_mib}Mi"}


def total(requests: dict[str, Resources]) -> Resources:
    return Resources(sum(r.cpu_m for r in requests.values()), sum(r.memory_mib for r in requests.values()))


def kube_reserved(spec: InstanceSpec) -> Resources:
    cores_m = spec.vcpus * 1000
    cpu = sum((min(cores_m, end) - start) * pct // 10000 for start, end, pct in _CPU_BANDS if cores_m > start)
    return Resources(cpu, 11 * spec.max_pods + 255)


def allocatable(spec: InstanceSpec) -> Resources:
    capacity = Resources(spec.vcpus * 1000, int(spec.memory_gib * 1024 * (1 - VM_MEMORY_OVERHEAD)))
    return capacity - kube_reserved(spec) - Resources(0, EVICTION_HARD_MIB)


# Requests of the pods every node runs besides ours. aws-node: VPC CNI DaemonSet (25m CPU);
# kube-proxy: EKS add-on (100m CPU). Our own charts' requests are set in device_plugins.py/kuberay.py.
NODE_DAEMONSETS = {"aws-node": Resources(25, 0), "kube-proxy": Resources(100, 0)}
# What runs on a system node: CoreDNS (EKS default: 2 replicas, 100m / 70Mi each; it tolerates no
# GPU taint), the KubeRay operator (its chart's default limits, made explicit requests), the Ray head
# (GCS, dashboard, Serve controller; no Ray tasks: num-cpus 0).
OPERATOR_REQUESTS = Resources(100, 512)
HEAD_REQUESTS = Resources(2000, 8192)
# With autoscaling on, the head pod also runs KubeRay's autoscaler sidecar (KubeRay v1.7.0 common/pod.go
# BuildAutoscalerContainer default: 500m / 512Mi), and the system node the Cluster Autoscaler (its
# chart sets no requests; 100m / 600Mi as in its AWS example, cloudprovider/aws/examples/
# cluster-autoscaler-autodiscover.yaml).
RAY_AUTOSCALER_REQUESTS = Resources(500, 512)
CLUSTER_AUTOSCALER_REQUESTS = Resources(100, 600)
# Karpenter's controller (nodeProvisioning: karpenter): its chart sets none; 1 CPU / 1 GiB as its
# getting-started guide installs it (aws/karpenter-provider-aws v1.14.1 step08-apply-helm-chart.sh).
KARPENTER_REQUESTS = Resources(1000, 1024)
SYSTEM_PODS = {
    "coredns": Resources(200, 140),
    "kuberay-operator": OPERATOR_REQUESTS,
    "ray-head": HEAD_REQUESTS,
    "ray-autoscaler": RAY_AUTOSCALER_REQUESTS,
    "cluster-autoscaler": CLUSTER_AUTOSCALER_REQUESTS,
}


def system_node_room(spec: InstanceSpec, monitoring: dict[str, Resources] | None = None) -> tuple[Resources, Resources]:
    """(what the system pods need on ONE system node, what that node offers): the head must fit
    next to CoreDNS, the operator and the monitoring pods (ray_llm_eks/domain/telemetry/observability.py system_pods)
    even when the pool runs a single node."""
    return total({**NODE_DAEMONSETS, **SYSTEM_PODS, **(monitoring or {})}), allocatable(spec)


def worker_container(spec: InstanceSpec, gpu_daemonsets: dict[str, Resources]) -> Resources:
    """The largest Ray worker that fits a GPU node next to its DaemonSets: whole cores and GiB,
    rounded down (the remainder is headroom for kubelet's rounding and log agents)."""
    free = allocatable(spec) - total(NODE_DAEMONSETS) - total(gpu_daemonsets)
    return Resources(free.cpu_m // 1000 * 1000, free.memory_mib // 1024 * 1024)


# Requests we set on each device plugin; the Ray worker sizing subtracts them from the node.
NVIDIA_PLUGIN_REQUESTS = Resources(50, 64)
EFA_PLUGIN_REQUESTS = Resources(10, 20)  # the aws-efa-k8s-device-plugin chart's own default


def gpu_node_daemonsets(with_efa: bool, monitoring: dict[str, Resources] | None = None) -> dict[str, Resources]:
    """What our plugins and monitoring (ray_llm_eks/domain/telemetry/observability.py gpu_daemonsets) take on a GPU node
    (the EFA plugin is installed when any pool has EFA)."""
    daemonsets = {"nvidia-device-plugin": NVIDIA_PLUGIN_REQUESTS, **(monitoring or {})}
    if with_efa:
        daemonsets["aws-efa-k8s-device-plugin"] = EFA_PLUGIN_REQUESTS
    return daemonsets


# Root volume of a system node. It holds the OS and logs, and the serving image the Ray head runs,
# twice over: containerd keeps an image compressed (content store) and unpacked (snapshots), and an
# image upgrade pulls the new one before kubelet's image GC drops the old one. Kubelet starts deleting
# images at 85% disk use (imageGCHighThresholdPercent default) and evicts pods at nodefs.available
# < 10%. GPU nodes need no such room: nodeadm puts containerd on their instance-store NVMe.
# The image sizes are a BUDGET for the "tens of GB" DLC image (compressed, unpacked), not a
# measurement: check `crictl images` on a node and raise systemNodes.diskSizeGiB if it is larger.
SERVING_IMAGE_BUDGET_GIB = (15, 35)
OS_AND_LOGS_GIB = 20
IMAGE_GC_HIGH_THRESHOLD = 0.85


def system_disk_gib(images: int) -> int:
    """Disk for the OS plus `images` copies of the serving image below the image-GC threshold,
    rounded up to 10 GiB."""
    need = (OS_AND_LOGS_GIB + images * sum(SERVING_IMAGE_BUDGET_GIB)) / IMAGE_GC_HIGH_THRESHOLD
    return math.ceil(need / 10) * 10


SYSTEM_DISK_GIB = system_disk_gib(images=2)  # default: room for an image upgrade (150 GiB)
SYSTEM_DISK_MIN_GIB = system_disk_gib(images=1)  # below this the head's image alone hits image GC (90 GiB)
GPU_DISK_GIB = 100  # a GPU node's root volume by default: OS and logs (containerd is on its NVMe, above)
