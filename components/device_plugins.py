"""DevicePlugins: the NVIDIA and AWS EFA device plugins, on GPU nodes only. The EKS AL2023 NVIDIA
AMI has the driver and the host EFA software, but neither plugin: without them no pod can ask for
`nvidia.com/gpu` or `vpc.amazonaws.com/efa`."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components.helm import helm_release
from domain.placement import GPU_NODE_SELECTOR, GPU_TOLERATION
from domain.settings import ChartPin, GpuPoolSettings
from domain.sizing import EFA_PLUGIN_REQUESTS, NVIDIA_PLUGIN_REQUESTS


def nvidia_values() -> dict:
    return {
        "nodeSelector": GPU_NODE_SELECTOR,
        "tolerations": [GPU_TOLERATION],
        "resources": {"requests": NVIDIA_PLUGIN_REQUESTS.as_k8s()},
    }


def efa_values(pools: Mapping[str, GpuPoolSettings], image_repository: str) -> dict:
    # The chart schedules only on the instance types in this allow-list (a nodeAffinity on
    # node.kubernetes.io/instance-type): list exactly our pools' types.
    types = sorted({p.nodes.instance_type for p in pools.values() if p.efa})
    return {
        # The region's own EKS add-on registry instead of the chart's us-west-2 default.
        "image": {"repository": image_repository},
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"], "values": types},
        "nodeSelector": GPU_NODE_SELECTOR,
        "tolerations": [GPU_TOLERATION],
        "resources": {"requests": EFA_PLUGIN_REQUESTS.as_k8s()},
    }


class DevicePlugins(pulumi.ComponentResource):
    """Both plugins in kube-system (device plugins run there at system-node-critical priority)."""

    def __init__(
        self,
        name: str,
        nvidia: ChartPin,
        efa: ChartPin,
        efa_image: str | None,
        pools: Mapping[str, GpuPoolSettings],
        opts: pulumi.ResourceOptions,
    ):
        super().__init__("ray-llm-eks:device_plugins:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.releases = [helm_release("nvidia-device-plugin", nvidia, "kube-system", nvidia_values(), child)]
        if any(p.efa for p in pools.values()):
            self.releases.append(
                helm_release("aws-efa-k8s-device-plugin", efa, "kube-system", efa_values(pools, efa_image), child)
            )
        self.register_outputs({})
