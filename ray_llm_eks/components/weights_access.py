"""WeightsAccess: read access to model weights mirrored in S3 (`modelSource: s3://...`) for the Ray
workers' own service account, through EKS Pod Identity, the fast path after a node replacement:
same-region S3 through the VPC's gateway endpoint instead of the hub through the NAT. Not the node
role: its instance metadata is closed to pods (hop limit 1, ray_llm_eks/components/node_metadata.py)."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.pod_identity import pod_identity_role
from ray_llm_eks.domain.core.facts import WEIGHTS_SERVICE_ACCOUNT


def bucket_and_prefix(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


def read_policy(uris: tuple[str, ...], partition: str) -> str:
    """List the prefixes and read their objects; nothing else in the bucket. A prefix is a folder: `models/qwen`
    grants `models/qwen/...`, not `models/qwen-private/` (Ray 2.58 lists it with a trailing slash:
    llm/_internal/common/utils/cloud_filesystem/s3_filesystem.py)."""
    statements = []
    for uri in uris:
        bucket, prefix = bucket_and_prefix(uri)
        below = f"{prefix.rstrip('/')}/*" if prefix.strip("/") else "*"  # the whole bucket: every key
        statements += [
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:{partition}:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [below]}},
            },
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:{partition}:s3:::{bucket}/{below}"},
        ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


class WeightsAccess(pulumi.ComponentResource):
    """A role only EKS Pod Identity assumes, with the read policy, associated with the workers' service
    account (WEIGHTS_SERVICE_ACCOUNT in the Ray namespace; the RayService's worker templates name it).
    The association exists before any worker starts: the Pod Identity webhook mutates a pod when it is
    created, so a worker created before it gets no credentials."""

    def __init__(
        self,
        name: str,
        uris: tuple[str, ...],
        cluster_name: str,
        namespace: str,
        region: str,
        agent: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`agent`: the cluster's EKS Pod Identity agent (ray_llm_eks/components/pod_identity.py)."""
        super().__init__("ray-llm-eks:weights_access:WeightsAccess", name, None, opts)
        role = pod_identity_role(f"{name}-role", self, cluster_name, (namespace, WEIGHTS_SERVICE_ACCOUNT))
        self.policy = aws.iam.RolePolicy(
            name,
            role=role.name,
            policy=read_policy(uris, botocore_facts.load().region_partition(region)),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-pod-identity",
            cluster_name=cluster_name,
            namespace=namespace,
            service_account=WEIGHTS_SERVICE_ACCOUNT,
            role_arn=role.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.policy, agent]),
        )
        self.register_outputs({"roleArn": role.arn})
