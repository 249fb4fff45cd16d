"""One way to install a pinned Helm chart into the stack's cluster."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from ray_llm_eks.domain.platform.versions import ChartPin

OCI = "oci://"


def helm_release(
    name: str,
    pin: ChartPin,
    namespace: pulumi.Input[str],
    values: dict,
    opts: pulumi.ResourceOptions,
) -> k8s.helm.v3.Release:
    """`helm.v3.Release` (not `v4.Chart`): Helm itself installs into a cluster this same stack
    creates, and Pulumi waits until the release's workloads are ready."""
    return k8s.helm.v3.Release(
        name,
        name=name,
        # An OCI chart is named by its full reference, without a repository (pulumi-kubernetes' chart
        # resolution, "By OCI registries"); a Helm repository by its URL.
        chart=f"{pin.repo}/{pin.chart}" if pin.repo.startswith(OCI) else pin.chart,
        version=pin.version,
        repository_opts=None if pin.repo.startswith(OCI) else k8s.helm.v3.RepositoryOptsArgs(repo=pin.repo),
        namespace=namespace,
        values=values,
        timeout=600,
        opts=opts,
    )
