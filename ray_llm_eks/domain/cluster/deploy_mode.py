"""How a stack deploys: onto the EKS cluster it creates (default), or onto an existing cluster it did
not create (EKS Blueprints, terraform-aws-eks, any conformant cluster), and whether `up` waits for
the RayService to turn Ready.

Keys (all in the ray-llm-eks namespace, listed in ray_llm_eks/domain/data/config_keys.yaml):
  existingCluster       true: skip the VPC, EKS and node groups; deploy onto the cluster of `kubeconfig`
  kubeconfig            (secret) that cluster's kubeconfig; unset: the environment's
  (ray_llm_eks/adapters/kube_client.py)
  kubeContext           the kubeconfig context to use (default: its current-context)
  installKubeRay        false: the cluster runs KubeRay already (only with existingCluster)
  installDevicePlugins  false: the cluster runs the NVIDIA and EFA device plugins already (only with existingCluster)
  kuberayNamespace      where that cluster's KubeRay operator runs (only with installKubeRay: false)
  waitForReady          false: `up` ends once the RayService is accepted, without waiting for Ready
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.errors import ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import KUBERAY_NAMESPACE, SECRET_MARKER
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.platform.field_checks import check_kube_context, check_kuberay_namespace

EXISTING_ONLY = ("kubeconfig", "kubeContext", "installKubeRay", "installDevicePlugins", "kuberayNamespace")


@dataclass(frozen=True)
class DeployMode:
    """How the stack deploys; the defaults are the config-key table's."""

    existing_cluster: bool = default("existingCluster")
    install_kuberay: bool = default("installKubeRay")
    install_device_plugins: bool = default("installDevicePlugins")
    wait_for_ready: bool = default("waitForReady")
    kube_context: str | None = None
    kubeconfig_configured: bool = False  # the `kubeconfig` key is set (its value is a secret, read apart)
    kuberay_namespace: str | None = None  # as the stack sets it (an existing cluster's KubeRay elsewhere)

    @property
    def operator_namespace(self) -> str:
        """The KubeRay operator's namespace: its pods reach the Ray head's dashboard."""
        return self.kuberay_namespace or KUBERAY_NAMESPACE


def load(raw: RawConfig) -> DeployMode:
    """The stack's deploy-mode keys (a secret key, kubeconfig, reads as SECRET_MARKER: its presence is enough)."""
    existing = raw.boolean("existingCluster")
    if not existing:
        for key in EXISTING_ONLY:
            if raw.given(key) is not None:
                raise ConfigError(
                    key, raw.given(key) if key != "kubeconfig" else SECRET_MARKER, "only with existingCluster: true"
                )
    elif raw.given("nodeProvisioning") not in (None, default("nodeProvisioning")):
        # The stack makes no node on a cluster it did not build.
        raise ConfigError(
            "nodeProvisioning",
            raw.given("nodeProvisioning"),
            f"{default('nodeProvisioning')} or unset with existingCluster: true",
        )
    context = check_kube_context("kubeContext", raw.given("kubeContext"))
    install_kuberay = raw.boolean("installKubeRay")
    operator_namespace = check_kuberay_namespace("kuberayNamespace", raw.given("kuberayNamespace"), install_kuberay)
    return DeployMode(
        existing_cluster=existing,
        install_kuberay=install_kuberay,
        install_device_plugins=raw.boolean("installDevicePlugins"),
        wait_for_ready=raw.boolean("waitForReady"),
        kube_context=context,
        kubeconfig_configured=raw.given("kubeconfig") is not None,
        kuberay_namespace=operator_namespace,
    )


def check_kubeconfig(text: str, context: str | None) -> None:
    """The kubeconfig parses and names the context to use (one line naming what is wrong)."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("kubeconfig", SECRET_MARKER, f"a kubeconfig in YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(config, dict) or not config.get("clusters") or not config.get("contexts"):
        raise ConfigError("kubeconfig", SECRET_MARKER, "a kubeconfig with clusters and contexts")
    names = [c.get("name") for c in config["contexts"]]
    wanted = context or config.get("current-context")
    if wanted not in names:
        key = "kubeContext" if context else "kubeconfig"
        raise ConfigError(key, context or SECRET_MARKER, f"a context of the kubeconfig: {yaml_text(names)}")
