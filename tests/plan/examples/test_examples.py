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


def _wired_plan(program: str, where: Path, hosted: set[str]):
    """`program` planned as the example's project, having declared each of the `hosted` components."""
    for name in ("Pulumi.yaml", "Pulumi.example.yaml", "requirements.txt"):
        shutil.copy(MY_CLUSTER / name, where / name)
    (where / "__main__.py").write_text(program)
    plan = run_program("example", root=where)
    assert {f"ray-llm-eks:index:{name}" for name in hosted} <= {r.type for r in plan.registrations}
    return plan


def test_the_hosted_components_wire_from_dicts_as_a_yaml_program_would(tmp_path: Path):
    plan = _wired_plan(WIRED, tmp_path, {"Network", "GcsStore", "LlmService", "InternalEndpoint", "ServiceMonitoring"})
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


# The cluster half as a YAML program would wire it: the Network's outputs into the Cluster, the Cluster's into a GPU
# pool, the Kubernetes provider from its kubeconfig for the autoscaler and the monitoring stack; the ordering the
# shipped program gives with objects, given here by dependsOn, as the components' descriptions ask.
WIRED_CLUSTER = """
import pulumi
import pulumi_kubernetes as k8s
from ray_llm_eks import provider

net = provider.Network("net", {"cluster_name": "mine", "region": "us-east-1"})
# The provider host hands a list wired from another resource over as one output: so here.
private, public = (pulumi.Output.from_input(ids) for ids in (net.private_subnet_ids, net.public_subnet_ids))
eks = provider.Cluster("eks", {
    "name": "mine", "region": "us-east-1", "vpc_id": net.vpc_id, "private_subnet_ids": private,
    "public_subnet_ids": public, "system_subnet_id": net.gpu_subnet_id,
    "system_nodes": {"instance_type": "m7i.xlarge", "desired_size": 1.0},
}, pulumi.ResourceOptions(depends_on=[net]))
pool = provider.GpuNodePool("prefill", {
    "nodes": {"instance_type": "g6.8xlarge", "min_size": 0.0, "max_size": 2.0}, "availability_zone": "us-east-1a",
    "cluster": eks.eks_cluster, "node_role": eks.node_role, "subnet_id": net.gpu_subnet_id,
    "ami_release_version": "v20261112", "efa": True,
})
on_cluster = pulumi.ResourceOptions(providers=[k8s.Provider("mine", kubeconfig=eks.kubeconfig)], depends_on=[pool])
provider.ClusterAutoscaler("autoscaler", {"cluster_name": "mine", "region": "us-east-1"}, on_cluster)
monitoring = {"cluster_name": "mine", "region": "us-east-1", "availability_zone": "us-east-1a", "storage_gib": 20.0}
provider.MonitoringStack("monitoring", monitoring, on_cluster)
pulumi.export("nodeGroupName", pool.node_group_name)
"""


def test_the_hosted_cluster_and_its_pool_wire_from_dicts_as_a_yaml_program_would(tmp_path: Path):
    hosted = {"Network", "Cluster", "GpuNodePool", "ClusterAutoscaler", "MonitoringStack"}
    plan = _wired_plan(WIRED_CLUSTER, tmp_path, hosted)
    cluster, role = plan.one("eks:index:Cluster"), plan.one("aws:iam/role:Role", "eks-node-role")
    gpu_subnet = plan.one("aws:ec2/subnet:Subnet", "net-private-us-east-1a")
    group = plan.one("eks:index:ManagedNodeGroup", "prefill-gpu")
    assert (group.inputs["cluster"], group.inputs["nodeRole"]) == (cluster.urn, role.id)
    assert group.inputs["subnetIds"] == [gpu_subnet.id] and group.inputs["enableEfaSupport"] is True
    assert group.inputs["scalingConfig"] == {"minSize": 0, "desiredSize": 1, "maxSize": 2}
    assert plan.one("eks:index:ManagedNodeGroup", "eks-system").inputs["subnetIds"] == [gpu_subnet.id]
    assert cluster.inputs["vpcId"] == plan.one("aws:ec2/vpc:Vpc").id
    # The control plane after the whole network (its NAT gateway's route), the charts after the pool's nodes.
    assert plan.depends_on(cluster.urn, plan.one("aws:ec2/natGateway:NatGateway").urn)
    for chart in ("cluster-autoscaler", "kube-prometheus-stack"):
        assert plan.depends_on(plan.one("kubernetes:helm.sh/v3:Release", chart).urn, group.urn), chart
    assert plan.outputs["nodeGroupName"]
