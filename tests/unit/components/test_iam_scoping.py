"""IAM scoped to this stack, called directly: S3 weight prefixes as folders, the Pod Identity roles' trust, the
Karpenter interruption queue's policy. What the program declares with them: tests/plan/components/."""

from __future__ import annotations

import json

from ray_llm_eks.components.karpenter import queue_policy
from ray_llm_eks.components.pod_identity import pod_identity_trust
from ray_llm_eks.components.weights_access import read_policy


def test_a_weights_prefix_is_a_folder_not_a_string_prefix():
    """`models/qwen` must not grant `models/qwen-private/`."""
    statements = json.loads(read_policy(("s3://acme/models/qwen", "s3://acme/other/"), "aws"))["Statement"]
    listed = [s["Condition"]["StringLike"]["s3:prefix"] for s in statements if s["Action"] == "s3:ListBucket"]
    read = [s["Resource"] for s in statements if s["Action"] == "s3:GetObject"]
    assert listed == [["models/qwen/*"], ["other/*"]]
    assert read == ["arn:aws:s3:::acme/models/qwen/*", "arn:aws:s3:::acme/other/*"]
    whole = json.loads(read_policy(("s3://acme",), "aws"))["Statement"]
    assert whole[1]["Resource"] == "arn:aws:s3:::acme/*"


def test_a_pod_identity_role_trusts_one_service_account_of_one_cluster_in_this_account():
    trust = pod_identity_trust("123456789012", "ray-llm-prod", "kube-system", "aws-load-balancer-controller")
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert statement["Condition"] == {
        "StringEquals": {
            "aws:SourceAccount": "123456789012",
            "aws:RequestTag/eks-cluster-name": "ray-llm-prod",
            "aws:RequestTag/kubernetes-namespace": "kube-system",
            "aws:RequestTag/kubernetes-service-account": "aws-load-balancer-controller",
        }
    }


def test_the_interruption_queue_takes_messages_for_its_own_account_only():
    policy = json.loads(queue_policy("arn:aws:sqs:us-east-1:123456789012:ray-llm-dev"))
    allow = next(s for s in policy["Statement"] if s["Effect"] == "Allow")
    assert allow["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}
