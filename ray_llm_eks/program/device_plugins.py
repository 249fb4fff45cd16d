"""Option: the NVIDIA and EFA device plugins (installDevicePlugins). Auto Mode's nodes bring the NVIDIA one (EKS user
guide automode.adoc), and its stacks have no EFA pool."""

import ray_llm_eks.stack_args as args
from ray_llm_eks.components.device_plugins import DevicePlugins
from ray_llm_eks.program.graph import Graph


def add(graph: Graph) -> None:
    settings = graph.settings
    if settings.deploy_mode.install_device_plugins and not graph.auto_mode_nodes:
        made = DevicePlugins("device-plugins", args.device_plugins_args(settings), graph.on_system_nodes)
        graph.installed.append(made)
