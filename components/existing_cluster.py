"""ExistingCluster: the Kubernetes provider for a cluster this stack did not create, handed out only
after the cluster was checked for what the stack relies on (domain.cluster_checks)."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from adapters.kube_client import KubeClient, KubeUnreachable, environment_kubeconfig
from domain.cluster_checks import ClusterMismatch, check_cluster, check_monitoring_crds, check_operator_namespace
from domain.deploy_mode import DeployMode, check_kubeconfig
from domain.errors import NOT_SHOWN, ConfigError
from domain.ray_service import ray_service_spec
from domain.settings import Settings


def verify_cluster(text: str, base_dir: str, mode: DeployMode, settings: Settings) -> None:
    """Read the cluster behind the kubeconfig `text`; raise ClusterMismatch naming every mismatch."""
    check_kubeconfig(text, mode.kube_context)
    api = KubeClient.from_kubeconfig(text, base_dir, mode.kube_context)
    spec = ray_service_spec(settings)  # the spec that deploys, keyed
    mismatches = check_cluster(
        api, spec, settings.gpu_pools, devices=not mode.install_device_plugins, crd=not mode.install_kuberay
    )
    if mode.kuberay_namespace is not None:  # set by the stack: a typo would lock the operator out
        mismatches += check_operator_namespace(api, mode.kuberay_namespace)
    if settings.serving.observability.mode == "external":
        mismatches += check_monitoring_crds(api)
    if mismatches:
        raise ClusterMismatch(mismatches)


CHECKED = "the existing cluster offers what the stack relies on (nodes, taints, GPUs, KubeRay; docs/operations.md)"


def deferred(why: str) -> str:
    """The offline plan's line for the cluster checks it could not run."""
    return f"deferred to deploy time: {CHECKED}: {why}"


class ExistingCluster(pulumi.ComponentResource):
    """Everything in-cluster goes through `self.provider`, which exists only once the checks passed,
    so a mismatched cluster gets no object at all. An offline plan (`offline_plan`) needs no cluster: where
    the kubeconfig is sealed (a `secure:` value only `pulumi up` decrypts) or its cluster is unreachable, the
    checks wait for deploy time and `self.deferred` says so."""

    def __init__(
        self,
        name: str,
        mode: DeployMode,
        settings: Settings,
        kubeconfig: pulumi.Output[str] | None,
        opts: pulumi.ResourceOptions | None = None,
        offline_plan: bool = False,
        kubeconfig_sealed: bool = False,
    ):
        super().__init__("ray-llm-eks:existing_cluster:ExistingCluster", name, None, opts)
        self.deferred: list[str] = []

        def verify(text: str, folder: str) -> str | None:
            """The checks; offline, the line that defers them when the cluster cannot be reached."""
            try:
                verify_cluster(text, folder, mode, settings)
            except KubeUnreachable as err:
                if offline_plan:
                    return deferred(f"the cluster was not reached ({err})")
                raise ConfigError(
                    "kubeconfig", NOT_SHOWN, f"a cluster this machine reaches ({err}); check the context and network"
                ) from None
            return None

        if kubeconfig is not None and kubeconfig_sealed:
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
            context=mode.kube_context,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
