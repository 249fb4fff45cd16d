"""GCS fault tolerance in the planned graph: prod holds the ElastiCache store and what reaches it, dev none of
it (and says why); the AUTH token is a secret everywhere it appears."""

from __future__ import annotations

import json

from ray_llm_eks.domain.cluster import gcs_ft

STORE = "aws:elasticache/replicationGroup:ReplicationGroup"
POLICY = "kubernetes:vpcresources.k8s.aws/v1beta1:SecurityGroupPolicy"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"


def test_prod_plans_the_store_private_tls_auth_and_reachable_from_the_head_only(plans):
    plan = plans["prod"]
    store = plan.one(STORE)
    inputs = store.inputs
    assert inputs["engine"] == "valkey" and inputs["transitEncryptionEnabled"] and inputs["atRestEncryptionEnabled"]
    assert inputs["authToken"] == "[secret]"  # a Pulumi secret in state and plan files alike
    assert inputs["numCacheClusters"] == 2 and inputs["automaticFailoverEnabled"] and inputs["multiAzEnabled"]
    subnets = plan.one("aws:elasticache/subnetGroup:SubnetGroup").inputs["subnetIds"]
    assert subnets and all("net-private-" in s for s in subnets)
    store_sg, head_sg = (
        plan.one("aws:ec2/securityGroup:SecurityGroup", n) for n in ("gcs-store-store", "gcs-store-head")
    )
    (rule,) = store_sg.inputs["ingress"]
    assert rule["fromPort"] == rule["toPort"] == 6379 and "cidrBlocks" not in rule
    assert rule["securityGroups"] == [f"<known after deploy: aws:ec2/securityGroup:SecurityGroup::{head_sg.name}.id>"]
    policy = plan.one(POLICY).inputs["spec"]
    assert policy["podSelector"] == {"matchLabels": gcs_ft.HEAD_SELECTOR}
    assert head_sg.name in json.dumps(policy["securityGroups"]) and "clusterSecurityGroupId" in json.dumps(policy)
    secret = plan.one("kubernetes:core/v1:Secret", "llm-gcs-redis-auth")
    assert secret.inputs["stringData"] == "[secret]"
    options = plan.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    assert options["redisAddress"].startswith("rediss://<known after deploy:")
    # The RayService waits for what the head needs (the Secret, its security group) before it exists.
    ray_service = plan.one(RAY_SERVICE)
    assert plan.depends_on(ray_service.urn, secret.urn) and plan.depends_on(ray_service.urn, plan.one(POLICY).urn)
    vpc_cni = plan.one("eks:index:Cluster").inputs["vpcCniOptions"]
    assert vpc_cni["enablePodEni"] and vpc_cni["disableTcpEarlyDemux"]
    assert "GCS fault tolerance: redis" in plan.outputs["gcsFaultTolerance"]
    assert any(
        line.startswith("GCS store ElastiCache Valkey") for line in json.dumps(plan.outputs["costEstimate"]).split('"')
    )


def test_dev_plans_no_store_and_says_why(plans):
    plan = plans["dev"]
    assert not plan.of_type(STORE) and not plan.of_type(POLICY)
    assert "gcsFaultToleranceOptions" not in plan.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]
    assert plan.outputs["gcsFaultTolerance"].startswith("GCS fault tolerance: off (environment dev")
    assert "enablePodEni" not in plan.one("eks:index:Cluster").inputs["vpcCniOptions"]
    assert "upgradeStrategy None" in plan.outputs["upgradeImpact"][0]
