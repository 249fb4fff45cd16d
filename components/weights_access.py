"""WeightsAccess: read access for the nodes to model weights mirrored in S3 (`modelSource: s3://...`),
the fast path after a node replacement: same-region S3 through the VPC's gateway endpoint instead
of the hub through the NAT."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from adapters import botocore_facts


def bucket_and_prefix(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


def read_policy(uris: tuple[str, ...], partition: str) -> str:
    """List the prefixes and read their objects; nothing else in the bucket."""
    statements = []
    for uri in uris:
        bucket, prefix = bucket_and_prefix(uri)
        statements += [
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:{partition}:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            },
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:{partition}:s3:::{bucket}/{prefix}*"},
        ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


class WeightsAccess(pulumi.ComponentResource):
    """An inline policy on the node role: the Ray workers download the weights with the node's
    credentials (IMDSv2, hop limit 2)."""

    def __init__(
        self,
        name: str,
        uris: tuple[str, ...],
        role: aws.iam.Role,
        region: str,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("ray-llm-eks:weights_access:WeightsAccess", name, None, opts)
        self.policy = aws.iam.RolePolicy(
            name,
            role=role.name,
            policy=read_policy(uris, botocore_facts.load().region_partition(region)),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
