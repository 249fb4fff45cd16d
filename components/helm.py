"""One way to install a pinned Helm chart into the stack's cluster."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from domain.versions import ChartPin


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
        chart=pin.chart,
        version=pin.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=pin.repo),
        namespace=namespace,
        values=values,
        timeout=600,
        opts=opts,
    )
