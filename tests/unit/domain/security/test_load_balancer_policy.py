"""The load balancer controller's IAM policy (ray_llm_eks/domain/security/load_balancer_policy.py): the controller's
own published document at its version, scoped to the stack's cluster, its actions real operations."""

from __future__ import annotations

import hashlib
import json

import botocore.loaders
import pytest

from ray_llm_eks.domain.security import load_balancer_policy as lbp

# sha256 of kubernetes-sigs/aws-load-balancer-controller docs/install/iam_policy.json at tag v3.5.0 (git blob
# 761d0e733c41089c91ea009dd29faf71918085e5), as fetched: the data file must be that document, unedited.
PUBLISHED_SHA256 = "16f232c9d9f79366fe949c4550ad517a202380058a9e48d45a4e215044a20a6a"
# IAM's service prefix -> botocore's service model.
BOTOCORE_SERVICE = {"elasticloadbalancing": "elbv2"}
# Actions that authorize no API operation of their own: WAF's AssociateWebACL on a load balancer asks for this
# one too (the Service Authorization Reference marks it "permission only"); botocore has no operation of that name.
PERMISSION_ONLY = {"elasticloadbalancing:SetWebAcl"}


def test_the_data_file_is_the_published_document_byte_for_byte():
    assert hashlib.sha256(lbp.UPSTREAM_POLICY.read_bytes()).hexdigest() == PUBLISHED_SHA256


def test_scoping_changes_only_the_cluster_tag_conditions():
    policy = lbp.controller_policy("aws", "ray-llm-dev")
    assert lbp.unscoped(policy) == lbp.published()
    assert policy != lbp.published()


def test_every_cluster_tag_condition_names_this_cluster():
    policy = lbp.controller_policy("aws", "ray-llm-dev")
    named = 0
    for statement in policy["Statement"]:
        condition = statement.get("Condition", {})
        for key in ("aws:RequestTag/elbv2.k8s.aws/cluster", "aws:ResourceTag/elbv2.k8s.aws/cluster"):
            assert condition.get("Null", {}).get(key) != "false", statement
            if key in condition.get("StringEquals", {}):
                assert condition["StringEquals"][key] == "ray-llm-dev"
                named += 1
    assert named == 7  # the published document's seven "tag present, any value" conditions


@pytest.mark.parametrize("partition", ["aws-cn", "aws-us-gov"])
def test_arns_name_the_stacks_partition(partition):
    text = json.dumps(lbp.controller_policy(partition, "c"))
    assert '"arn:aws:' not in text and f'"arn:{partition}:ec2:*:*:security-group/*"' in text


def test_every_action_is_an_operation_of_its_service_in_botocore():
    loader = botocore.loaders.Loader()
    operations: dict[str, set[str]] = {}
    unknown = []
    for statement in lbp.published()["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            prefix, name = action.split(":")
            service = BOTOCORE_SERVICE.get(prefix, prefix)
            if service not in operations:
                operations[service] = set(loader.load_service_model(service, "service-2")["operations"])
            if name not in operations[service]:
                unknown.append(action)
    assert set(unknown) == PERMISSION_ONLY
