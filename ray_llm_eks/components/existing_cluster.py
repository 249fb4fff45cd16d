"""ExistingCluster: the Kubernetes provider for a cluster this stack did not create, handed out only
after the cluster was checked for what the stack relies on (ray_llm_eks.domain.platform.cluster_checks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ray_llm_eks.adapters.kube_client import KubeClient, KubeUnreachable, environment_kubeconfig
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.domain.cluster.deploy_mode import check_kubeconfig
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.errors import NOT_SHOWN, ConfigError
from ray_llm_eks.domain.platform.cluster_checks import (
    ClusterMismatch,
    check_cluster,
    check_monitoring_crds,
    check_operator_namespace,
)
from ray_llm_eks.domain.platform.field_checks import check_kube_context, check_kuberay_namespace

ARGS = "ExistingClusterArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())


@dataclass(frozen=True)
class ExistingClusterArgs:
    """The cluster behind a kubeconfig and what the stack is about to apply to it, checked before any object."""

    ray_service_spec: Mapping[str, Any]
    """The RayService spec that deploys (ray_llm_eks/domain/render/ray_service.py): its groups' nodes and the CRD's
    fields."""
    pools: Sequence[str]
    """The GPU pools' names: each one's worker group must find its nodes (config key gpuPools)."""
    kubeconfig: pulumi.Input[str] | None = None
    """The cluster's kubeconfig, a secret (config key kubeconfig); none: the environment's (KUBECONFIG)."""
    kube_context: str | None = None
    """The kubeconfig's context to use (config key kubeContext); none: its current-context."""
    install_kuberay: bool | None = default("installKubeRay")
    """The stack installs KubeRay (config key installKubeRay); false: the cluster's RayService CRD is checked."""
    install_device_plugins: bool | None = default("installDevicePlugins")
    """The stack installs the device plugins (config key installDevicePlugins); false: nodes must advertise GPUs."""
    kuberay_namespace: str | None = None
    """Where the cluster's own KubeRay operator runs, only with install_kuberay false (config key kuberayNamespace)."""
    monitoring_crds: bool | None = False
    """Monitors go to the cluster's own Prometheus Operator (observability mode external): its CRDs are checked."""
    offline_plan: bool | None = False
    """An offline plan: an unreachable cluster defers the checks to deploy time instead of failing."""
    kubeconfig_sealed: bool | None = False
    """The kubeconfig is a `secure:` value only `pulumi up` decrypts: the checks wait for deploy time."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_kube_context("kube_context", self.kube_context, ARGS)
        check_kuberay_namespace(
            "kuberay_namespace", self.kuberay_namespace, self.install_kuberay, ARGS, install_key="install_kuberay"
        )


def verify_cluster(text: str, base_dir: str, args: ExistingClusterArgs) -> None:
    """Read the cluster behind the kubeconfig `text`; raise ClusterMismatch naming every mismatch."""
    check_kubeconfig(text, args.kube_context)
    api = KubeClient.from_kubeconfig(text, base_dir, args.kube_context)
    mismatches = check_cluster(
        api,
        dict(args.ray_service_spec),
        args.pools,
        devices=not args.install_device_plugins,
        crd=not args.install_kuberay,
    )
    if args.kuberay_namespace is not None:  # set by the stack: a typo would lock the operator out
        mismatches += check_operator_namespace(api, args.kuberay_namespace)
    if args.monitoring_crds:
        mismatches += check_monitoring_crds(api)
    if mismatches:
        raise ClusterMismatch(mismatches)


CHECKED = "the existing cluster offers what the stack relies on (nodes, taints, GPUs, KubeRay; docs/operations.md)"


def deferred(why: str) -> str:
    """The offline plan's line for the cluster checks it could not run."""
    return f"deferred to deploy time: {CHECKED}: {why}"


class ExistingCluster(pulumi.ComponentResource):
    """Everything in-cluster goes through `self.provider`, which exists only once the checks passed,
    so a mismatched cluster gets no object at all. An offline plan (`args.offline_plan`) needs no cluster: where
    the kubeconfig is sealed (a `secure:` value only `pulumi up` decrypts) or its cluster is unreachable, the
    checks wait for deploy time and `self.deferred` says so."""

    def __init__(self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:existing_cluster:ExistingCluster", name, None, opts)
        self.deferred: list[str] = []
        kubeconfig = None if args.kubeconfig is None else pulumi.Output.from_input(args.kubeconfig)

        def verify(text: str, folder: str) -> str | None:
            """The checks; offline, the line that defers them when the cluster cannot be reached."""
            try:
                verify_cluster(text, folder, args)
            except KubeUnreachable as err:
                if args.offline_plan:
                    return deferred(f"the cluster was not reached ({err})")
                raise ConfigError(
                    "kubeconfig", NOT_SHOWN, f"a cluster this machine reaches ({err}); check the context and network"
                ) from None
            return None

        if kubeconfig is not None and args.kubeconfig_sealed:
            self.deferred.append(deferred("kubeconfig is a `secure:` value, which only `pulumi up` decrypts"))
            provider_kubeconfig: pulumi.Input[str] | None = pulumi.Output.secret(kubeconfig)
        elif kubeconfig is not None:

            def checked(text: str) -> str:
                line = verify(text, ".")
                if line:
                    pulumi.log.warn(line)  # known only inside the Output: the plan lists it among the warnings
                return text

            provider_kubeconfig = pulumi.Output.secret(kubeconfig.apply(checked))
        else:
            # The environment's kubeconfig: the provider reads it itself (relative paths in it stay valid).
            line = verify(*environment_kubeconfig())
            self.deferred += [line] if line else []
            provider_kubeconfig = None
        self.provider = k8s.Provider(
            name,
            kubeconfig=provider_kubeconfig,
            context=args.kube_context,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
