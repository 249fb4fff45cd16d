"""The AWS Load Balancer Controller's IAM policy: the controller's own published policy for its version
(kubernetes-sigs/aws-load-balancer-controller docs/install/iam_policy.json, kept byte for byte in
ray_llm_eks/domain/data/), rendered for the stack's partition and scoped to the stack's cluster.

Two changes to the published document, and no others:
- its ARNs name the stack's partition: the published `iam_policy_cn.json`, `iam_policy_us-gov.json` and
  `iam_policy_eusc.json` of v3.5.0 hold the same statements with only the partition changed;
- where the published policy lets a statement act on anything carrying the controller's cluster tag
  (`"Null": {"aws:RequestTag|ResourceTag/elbv2.k8s.aws/cluster": "false"}`: the tag present, any
  value), the tag must name this cluster: the controller writes its `clusterName` there (v3.5.0
  pkg/deploy/tracking/provider.go StackTags), so a second cluster's controller in the same account
  cannot touch this stack's load balancers and security groups, nor this one theirs.
Left as published: the statement allowing ec2:AuthorizeSecurityGroupIngress and RevokeSecurityGroupIngress on
`*` without a condition (the controller opens the targets' own security groups, which it did not create
and so did not tag, to its load balancer), and the read-only describes."""

from __future__ import annotations

import copy
import json

from ray_llm_eks.domain.core import packaged

# Chart 3.5.0 ships app v3.5.0 (eks-charts stable/aws-load-balancer-controller Chart.yaml appVersion).
POLICY_VERSION = "v3.5.0"
UPSTREAM_POLICY = packaged.DATA / f"aws-load-balancer-controller-{POLICY_VERSION}-iam-policy.json"
CLUSTER_TAG = "elbv2.k8s.aws/cluster"  # the controller's cluster tag (shared_constants.TagKeyK8sCluster)
_TAG_KEYS = (f"aws:RequestTag/{CLUSTER_TAG}", f"aws:ResourceTag/{CLUSTER_TAG}")


def published() -> dict:
    """The controller's policy as published (partition aws, the cluster tag with any value)."""
    return packaged.load_json(UPSTREAM_POLICY)


def controller_policy(partition: str, cluster_name: str) -> dict:
    """The published policy for `partition`, every cluster-tag condition naming `cluster_name`."""
    text = json.dumps(published()).replace('"arn:aws:', f'"arn:{partition}:')
    policy = json.loads(text)
    for statement in policy["Statement"]:
        condition = statement.get("Condition", {})
        present = condition.get("Null", {})
        for key in _TAG_KEYS:
            if present.get(key) == "false":  # the tag is there: now it must name this cluster
                del present[key]
                condition.setdefault("StringEquals", {})[key] = cluster_name
        if "Null" in condition and not present:
            del condition["Null"]
    return policy


def unscoped(policy: dict) -> dict:
    """`policy` with this cluster's name taken back out of its conditions: the published document's
    statements again (for aws), which the tests compare."""
    policy = copy.deepcopy(policy)
    for statement in policy["Statement"]:
        condition = statement.get("Condition", {})
        equals = condition.get("StringEquals", {})
        for key in _TAG_KEYS:
            if key in equals:
                del equals[key]
                condition.setdefault("Null", {})[key] = "false"
        if "StringEquals" in condition and not equals:
            del condition["StringEquals"]
    return policy
