"""DevicePlugins: the NVIDIA and AWS EFA device plugins, on GPU nodes only. The EKS AL2023 NVIDIA
AMI has the driver and the host EFA software, but neither plugin: without them no pod can ask for
`nvidia.com/gpu` or `vpc.amazonaws.com/efa`.

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.components.helm import helm_release
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.platform.field_checks import check_chart_version
from ray_llm_eks.domain.platform.placement import GPU_NODE_SELECTOR, GPU_TOLERATION, INSTANCE_TYPE_LABEL
from ray_llm_eks.domain.platform.sizing import EFA_PLUGIN_REQUESTS, NVIDIA_PLUGIN_REQUESTS
from ray_llm_eks.domain.platform.versions import EFA_PLUGIN_CHART, NVIDIA_PLUGIN_CHART, ChartPin

ARGS = "DevicePluginsArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())


@dataclass(frozen=True)
class DevicePluginsArgs:
    """The plugins' chart versions, and the instance types the EFA plugin runs on (none: NVIDIA's alone)."""

    nvidia_chart_version: str | None = default("nvidiaDevicePluginVersion")
    """The nvidia-device-plugin chart's exact version (config key nvidiaDevicePluginVersion)."""
    efa_chart_version: str | None = default("efaDevicePluginVersion")
    """The aws-efa-k8s-device-plugin chart's exact version (config key efaDevicePluginVersion)."""
    efa_instance_types: Sequence[str] | None = ()
    """The EFA node pools' instance types: the EFA plugin schedules on these alone; none: no EFA plugin."""
    efa_image_repository: str | None = None
    """The EFA plugin image's repository in the region's EKS add-on registry (with efa_instance_types)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_chart_version(
            "nvidia_chart_version",
            self.nvidia_chart_version,
            NVIDIA_PLUGIN_CHART[1],
            default("nvidiaDevicePluginVersion"),
            ARGS,
        )
        check_chart_version(
            "efa_chart_version", self.efa_chart_version, EFA_PLUGIN_CHART[1], default("efaDevicePluginVersion"), ARGS
        )
        if self.efa_instance_types and not self.efa_image_repository:
            raise ConfigError(
                "efa_image_repository",
                self.efa_image_repository,
                "the EFA plugin image's repository in the region's EKS add-on registry (with efa_instance_types)",
                ARGS,
            )


def nvidia_values() -> dict:
    return {
        "nodeSelector": GPU_NODE_SELECTOR,
        "tolerations": [GPU_TOLERATION],
        "resources": {"requests": NVIDIA_PLUGIN_REQUESTS.as_k8s()},
    }


def efa_values(instance_types: Sequence[str], image_repository: str | None) -> dict:
    return {
        # The region's own EKS add-on registry instead of the chart's us-west-2 default.
        "image": {"repository": image_repository},
        # The chart schedules only on the instance types in this allow-list (a nodeAffinity on
        # node.kubernetes.io/instance-type): list exactly the EFA pools' types.
        "supportedInstanceLabels": {
            "keys": [INSTANCE_TYPE_LABEL],
            "values": sorted(set(instance_types)),
        },
        "nodeSelector": GPU_NODE_SELECTOR,
        "tolerations": [GPU_TOLERATION],
        "resources": {"requests": EFA_PLUGIN_REQUESTS.as_k8s()},
    }


class DevicePlugins(pulumi.ComponentResource):
    """Both plugins in kube-system (device plugins run there at system-node-critical priority)."""

    TYPE = "ray-llm-eks:device_plugins:DevicePlugins"  # the shipped program's resources keep their URNs

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        nvidia = ChartPin(*NVIDIA_PLUGIN_CHART, args.nvidia_chart_version)
        self.releases = [helm_release("nvidia-device-plugin", nvidia, "kube-system", nvidia_values(), child)]
        if args.efa_instance_types:
            efa = ChartPin(*EFA_PLUGIN_CHART, args.efa_chart_version)
            values = efa_values(args.efa_instance_types, args.efa_image_repository)
            self.releases.append(helm_release("aws-efa-k8s-device-plugin", efa, "kube-system", values, child))
        self.register_outputs({})
