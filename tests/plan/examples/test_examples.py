"""examples/: the package's consumers, planned under the same mocks as the shipped program."""

from __future__ import annotations

import shutil
from pathlib import Path

from offline.plan import run_program
from tests.conftest import ROOT

MY_CLUSTER = ROOT / "examples" / "pd-service-on-my-cluster"


def test_the_pd_service_on_my_cluster_declares_the_operator_and_the_service_and_nothing_on_aws():
    plan = run_program("example", root=MY_CLUSTER)
    types = {r.type for r in plan.registrations}
    assert {"ray-llm-eks:kuberay:KubeRayOperator", "ray-llm-eks:llm_service:LlmService"} <= types
    assert not {t for t in types if t.startswith(("aws:", "eks:"))}
    service = plan.one("kubernetes:ray.io/v1:RayService")
    groups = [g["groupName"] for g in service.inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]]
    assert groups == ["prefill", "decode"]
    assert service.provider.startswith(plan.one("pulumi:providers:kubernetes", "my-cluster").urn)  # on my cluster
    assert plan.outputs["openaiBaseUrl"] == "http://llm-serve-svc.llm.svc.cluster.local:8000/v1"


# A program that wires the hosted components as a Pulumi YAML one would: each from a dict of its inputs (the host's
# hand-over, ray_llm_eks/provider.py), one's outputs another's inputs.
WIRED = """
import pulumi
from ray_llm_eks import provider

net = provider.Network("net", {"cluster_name": "mine", "region": "us-east-1", "nat_gateways": "single"})
store = provider.GcsStore(
    "gcs", {"cluster_name": "mine", "vpc_id": net.vpc_id, "private_subnet_ids": net.private_subnet_ids, "replicas": 1.0}
)
pools = [{"name": "prefill", "instance_type": "g6.8xlarge"}, {"name": "decode", "instance_type": "g6.8xlarge"}]
service = {"region": "us-east-1", "gpu_pools": pools, "environment": "dev", "api_key_check": False}
llm = provider.LlmService("llm", service)
endpoint = provider.InternalEndpoint("endpoint", {"source_ranges": ["10.1.0.0/16"]})
provider.ServiceMonitoring("monitoring", {"namespace": "llm"})
pulumi.export("vpcId", net.vpc_id)
pulumi.export("storeAddress", store.address)
pulumi.export("headSecurityGroupId", store.head_security_group_id)
pulumi.export("url", endpoint.url)
"""


def test_the_hosted_components_wire_from_dicts_as_a_yaml_program_would(tmp_path: Path):
    for name in ("Pulumi.yaml", "Pulumi.example.yaml", "requirements.txt"):
        shutil.copy(MY_CLUSTER / name, tmp_path / name)
    (tmp_path / "__main__.py").write_text(WIRED)
    plan = run_program("example", root=tmp_path)
    types = {r.type for r in plan.registrations}
    hosted = {"Network", "GcsStore", "LlmService", "InternalEndpoint", "ServiceMonitoring"}
    assert {f"ray-llm-eks:index:{name}" for name in hosted} <= types
    vpc = plan.one("aws:ec2/vpc:Vpc")
    subnets = plan.one("aws:elasticache/subnetGroup:SubnetGroup").inputs["subnetIds"]
    assert len(subnets) == 2 and all(isinstance(s, str) and s for s in subnets)  # the Network's two private ones
    assert plan.one("aws:elasticache/replicationGroup:ReplicationGroup").inputs["numCacheClusters"] == 2
    groups = plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == ["prefill", "decode"]
    assert plan.outputs["vpcId"] == vpc.id and plan.outputs["storeAddress"].startswith("rediss://")
    assert plan.outputs["headSecurityGroupId"]
    monitors = [r for r in plan.registrations if r.type.startswith("kubernetes:monitoring.coreos.com/v1:PodMonitor")]
    assert monitors and all(m.inputs["metadata"]["namespace"] == "llm" for m in monitors)
