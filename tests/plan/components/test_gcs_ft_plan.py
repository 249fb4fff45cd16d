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


def test_with_redis_the_head_starts_through_the_module_that_keeps_the_password_out_of_arguments(plans):
    """KubeRay would write the store's password into the head's start command and Ray into its processes'
    arguments (ray_llm_eks/serve_ingress/ray_start.py): with redis the head runs that module, KubeRay told to
    keep the command, the module mounted; tests/harness/serve_ingress/test_ray_start.py runs it on Ray 2.58."""
    from ray_llm_eks.domain.cluster import gcs_ft
    from ray_llm_eks.domain.serving import api_keys

    for stack, plan in plans.items():
        service = plan.one("kubernetes:ray.io/v1:RayService")
        cluster = service.inputs["spec"]["rayClusterConfig"]
        template = cluster["headGroupSpec"]["template"]
        container = template["spec"]["containers"][0]
        redis = (cluster.get("gcsFaultToleranceOptions") or {}).get("backend") == "redis"
        assert (template["metadata"]["annotations"].get("ray.io/overwrite-container-cmd") == "true") == redis, stack
        assert ("args" in container) == redis, stack
        if redis:
            assert container["args"] == [f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; exec python "
                                         f"{api_keys.MODULE_DIR}/{gcs_ft.START_MODULE}"]  # fmt: skip
            assert api_keys.code_volume_mount() in container["volumeMounts"], stack
            assert "ray_start.py" in plan.one("kubernetes:core/v1:ConfigMap", "llm-api-key-ingress").inputs["data"]
            assert not [e for e in container.get("env") or [] if e["name"] == "REDIS_PASSWORD"]  # KubeRay's to set


def test_redis_without_the_key_check_still_ships_and_mounts_the_start_module():
    from offline.plan import run_program

    plan = run_program("dev", {"ray-llm-eks:gcsFaultTolerance": "redis", "ray-llm-eks:apiKeyCheck": False})
    head = plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert [v["name"] for v in head["template"]["spec"]["volumes"]] == ["api-key-ingress"]  # no keys Secret
    shipped = plan.one("kubernetes:core/v1:ConfigMap", "llm-api-key-ingress").inputs["data"]
    assert "ray_start.py" in shipped
    assert not [r for r in plan.of_type("kubernetes:core/v1:Secret") if r.name == "llm-api-keys"]
