"""EKS Pod Identity, shared by the controllers that need an AWS role (Cluster Autoscaler, AWS Load
Balancer Controller): the agent add-on, which EKS allows once per cluster, and the role + association
each controller's service account gets."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from ray_llm_eks.components.args import present
from ray_llm_eks.components.helm import helm_release
from ray_llm_eks.domain.platform import versions
from ray_llm_eks.domain.platform.versions import ChartPin

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


class PodIdentityAgent(pulumi.ComponentResource):
    """The eks-pod-identity-agent add-on: one per cluster, so every controller waits for this one."""

    def __init__(
        self,
        name: str,
        cluster_name: str,
        kubernetes_version: str,
        opts: pulumi.ResourceOptions,
        version: str | None = None,
    ):
        """`version`: the add-on's kept version (ray_llm_eks/domain/platform/pins.py); none: EKS's default now."""
        super().__init__("ray-llm-eks:pod_identity:PodIdentityAgent", name, None, opts)
        self.addon = default_version_addon(
            name,
            cluster_name,
            versions.POD_IDENTITY_AGENT_ADDON,
            kubernetes_version,
            pulumi.ResourceOptions(parent=self),
            version=version,
        )
        self.register_outputs({})


def default_version_addon(
    name: str,
    cluster_name: str,
    addon: str,
    kubernetes_version: str,
    opts: pulumi.ResourceOptions,
    version: str | None = None,
    **args,
) -> aws.eks.Addon:
    """An EKS add-on at `version` (the one `make pin` kept), else at EKS's default version for the cluster's minor
    now (ray_llm_eks/domain/platform/versions.py says why not a table; pins.py why kept); `args`: its other inputs."""
    if version is None:
        version = aws.eks.get_addon_version_output(
            addon_name=addon, kubernetes_version=kubernetes_version, most_recent=False
        ).version
    return aws.eks.Addon(name, cluster_name=cluster_name, addon_name=addon, addon_version=version, opts=opts, **args)


def pod_identity_trust(account_id: str, cluster_name: str, namespace: str, service_account: str) -> dict:
    """EKS Pod Identity may assume the role for this account's pods of one service account of one cluster only:
    the service's own source account, and the session tags it sets on every assumption (EKS user guide,
    pod-id-abac: eks-cluster-name, kubernetes-namespace, kubernetes-service-account), which it needs
    sts:TagSession for. Another cluster's association, or another service account's, naming this role is
    refused."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {
                        "aws:SourceAccount": account_id,
                        "aws:RequestTag/eks-cluster-name": cluster_name,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": service_account,
                    }
                },
            }
        ],
    }


def pod_identity_role(
    name: str, parent: pulumi.Resource, cluster_name: str, service_account: tuple[str, str]
) -> aws.iam.Role:
    """A role only EKS Pod Identity can assume, for `service_account` (namespace, name) of `cluster_name` in the
    deploying account."""
    namespace, account_name = service_account
    account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=parent)).account_id
    trust = account.apply(lambda a: json.dumps(pod_identity_trust(a, cluster_name, namespace, account_name)))
    return aws.iam.Role(name, assume_role_policy=trust, opts=pulumi.ResourceOptions(parent=parent))


@dataclass(frozen=True)
class ControllerRelease:
    """A controller's chart and the AWS role its service account (namespace, name) gets."""

    release: str
    pin: ChartPin
    values: dict
    service_account: tuple[str, str]


def release_with_role(
    name: str,
    controller: ControllerRelease,
    cluster_name: str,
    role: aws.iam.Role,
    policies: list[pulumi.Resource],
    agent: pulumi.Resource | None,
    parent: pulumi.Resource,
) -> k8s.helm.v3.Release:
    """The association of the role with the service account (once its policies are attached), then
    the release: credentials exist before the pod asks for them; on destroy the pod goes first. `agent`: the
    cluster's Pod Identity agent where the caller has it in hand; none: the caller's component waits for it."""
    namespace, account = controller.service_account
    association = aws.eks.PodIdentityAssociation(
        f"{name}-pod-identity",
        cluster_name=cluster_name,
        namespace=namespace,
        service_account=account,
        role_arn=role.arn,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=policies),
    )
    return helm_release(
        controller.release,
        controller.pin,
        namespace,
        controller.values,
        pulumi.ResourceOptions(parent=parent, depends_on=present(agent, association)),
    )
