"""What the program declares for the AWS half, read from the offline plan of the real stack files."""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import json

import pulumi_eks as eks
import pytest

from offline.mocks import is_placeholder
from offline.plan import Plan, root_message, run_program
from ray_llm_eks.adapters.stackfile import load_stack
from ray_llm_eks.components.cluster import access_entry_name
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.platform.placement import LOCAL_NVME_ROOT
from tests.conftest import ROOT

CLUSTER = "eks:index:Cluster"
MNG = "eks:index:ManagedNodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"


def gpu_groups(plan: Plan):
    return [r for r in plan.of_type(MNG) if r.inputs.get("enableEfaSupport")]


def is_private(subnet) -> bool:
    """Tagged for internal load balancers (ray_llm_eks/components/network.py): the private subnets."""
    return (subnet.inputs.get("tags") or {}).get("kubernetes.io/role/internal-elb") == "1"


def subnet_by_id(plan: Plan, subnet_id: str):
    return next(r for r in plan.of_type(SUBNET) if r.id == subnet_id)


def test_dev_cluster(dev):
    cluster = dev.one(CLUSTER)
    i = cluster.inputs
    assert i["name"] == "ray-llm-dev" and i["version"] == "1.35"
    assert i["authenticationMode"] == "API" and i["skipDefaultNodeGroup"] is True
    assert i["endpointPrivateAccess"] is True and i["endpointPublicAccess"] is True
    assert i["publicAccessCidrs"] == ["0.0.0.0/0"]
    assert "createOidcProvider" not in i and i["nodeAssociatePublicIpAddress"] is False  # no IAM OIDC provider
    assert i["enabledClusterLogTypes"] == ["api", "audit", "authenticator"]
    key = dev.one("aws:kms/key:Key")
    assert key.inputs["enableKeyRotation"] is True
    assert i["encryptionConfigKeyArn"] == "<known after deploy: aws:kms/key:Key::eks-secrets.arn>"
    private = sorted(r.id for r in dev.of_type(SUBNET) if is_private(r))
    assert sorted(i["privateSubnetIds"]) == private and len(private) == 2


def test_control_plane_log_group_is_created_before_the_cluster(dev):
    log_group = dev.one("aws:cloudwatch/logGroup:LogGroup")
    assert log_group.inputs["name"] == "/aws/eks/ray-llm-dev/cluster"
    assert log_group.inputs["retentionInDays"] == 30
    assert dev.depends_on(dev.one(CLUSTER).urn, log_group.urn)


def test_node_role_has_the_policies_nodes_need(dev):
    role = dev.one("aws:iam/role:Role", "eks-node-role")
    assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    attachments = dev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    attached = sorted(r.inputs["policyArn"] for r in attachments if r.name.startswith("eks-node-role"))
    # Joining and the Pod Identity agent, the VPC CNI, image pulls; no S3, no SSM parameters, no ECR listing.
    assert attached == [
        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
        "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
        "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    ]
    inline = [
        r for r in dev.of_type("aws:iam/rolePolicy:RolePolicy") if r.inputs["role"].endswith("::eks-node-role.name>")
    ]
    assert [r.name for r in inline] == ["eks-node-role-session-manager"]
    (session,) = inline
    assert json.loads(session.inputs["policy"])["Statement"] == [
        {
            "Effect": "Allow",
            "Action": [
                "ssm:UpdateInstanceInformation",
                "ssmmessages:CreateControlChannel",
                "ssmmessages:CreateDataChannel",
                "ssmmessages:OpenControlChannel",
                "ssmmessages:OpenDataChannel",
            ],
            "Resource": "*",
        }
    ]
    for group in dev.of_type(MNG):
        assert group.inputs["nodeRole"] == role.id
    # API auth: EKS makes the node groups' access entries; pulumi-eks refuses instanceRoles here.
    assert "instanceRoles" not in dev.one(CLUSTER).inputs


def test_old_instance_roles_input_fails_the_plan_as_pulumi_eks_words_it(monkeypatch, caplog):
    """instanceRoles with API auth, which pulumi-eks refuses in its own code, does not get past
    `make plan`: offline/eks_rules.py applies pulumi-eks's validateAuthenticationMode. The run's
    leftover futures carrying that error are not logged again when collected; other errors still are."""
    original = eks.Cluster.__init__

    def cluster_with_instance_roles(self, *args, **kwargs):
        kwargs["instance_roles"] = [kwargs["vpc_id"]]
        original(self, *args, **kwargs)

    monkeypatch.setattr(eks.Cluster, "__init__", cluster_with_instance_roles)
    with pytest.raises(ValueError) as caught:
        run_program("dev")
    assert root_message(caught.value) == (
        "pulumi-eks refuses eks:index:Cluster 'eks': The 'instanceRoles' property does not support non-empty "
        "values when 'authenticationMode' is set to 'API'."
    )
    loop = asyncio.get_event_loop()
    for error in (caught.value, RuntimeError("not an error a plan raised")):
        leftover = loop.create_future()  # as the run leaves them: holding an error nobody retrieves
        leftover.set_exception(error)
        del leftover
    gc.collect()
    logged = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert len(logged) == 1 and "not an error a plan raised" in logged[0], logged


def test_cluster_admins_become_access_entries(dev):
    ci = "arn:aws:iam::123456789012:role/ci/deployer"
    plan = run_program("dev", {"ray-llm-eks:clusterAdmins": [ci, "arn:aws:iam::123456789012:user/alice"]})
    entries = plan.one(CLUSTER).inputs["accessEntries"]
    assert len(entries) == 2
    entry = entries[access_entry_name(ci)]
    assert entry["principalArn"] == ci
    assert entry["accessPolicies"] == {
        "cluster-admin": {
            "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
            "accessScope": {"type": "cluster"},
        }
    }
    assert dev.one(CLUSTER).inputs.get("accessEntries", {}) == {}, "dev sets no clusterAdmins"


def test_system_pool(dev):
    system = dev.one(MNG, "eks-system")
    assert system.inputs["instanceTypes"] == ["m7i.xlarge"]
    assert system.inputs["labels"] == {POOL_NODE_LABEL: "system"}
    assert system.inputs["scalingConfig"] == {"minSize": 1, "desiredSize": 1, "maxSize": 2}
    assert system.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    # (20 GiB OS + 2 x (15 + 35) GiB serving image) / 85% image-GC threshold = 141.2 -> 150 GiB.
    assert system.inputs["diskSize"] == 150
    assert "taints" not in system.inputs
    # The GPU zone's private subnet: zonal volumes (Prometheus) stay reachable when a node is replaced.
    (subnet,) = system.inputs["subnetIds"]
    assert subnet == dev.one(MNG, "prefill-gpu").inputs["subnetIds"][0]
    assert subnet in dev.one(CLUSTER).inputs["privateSubnetIds"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_gpu_pools_share_one_subnet_in_the_gpu_zone_with_efa(plans, stack):
    plan = plans[stack]
    groups = gpu_groups(plan)
    assert sorted(g.name for g in groups) == ["decode-gpu", "prefill-gpu"]
    subnets = {tuple(g.inputs["subnetIds"]) for g in groups}
    assert len(subnets) == 1 and len(next(iter(subnets))) == 1, "all EFA nodes must share ONE subnet"
    subnet = subnet_by_id(plan, groups[0].inputs["subnetIds"][0])
    assert is_private(subnet), "GPU nodes go in a private subnet"
    for group in groups:
        assert group.inputs["enableEfaSupport"] is True
        assert group.inputs["placementGroupAvailabilityZone"] == subnet.inputs["availabilityZone"]
        assert subnet.inputs["availabilityZone"] == plan.outputs["gpuAvailabilityZone"]
        assert group.inputs["enableIMDSv2"] is True
    assert plan.outputs["gpuSubnetId"] == subnet.id


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_node_group_launch_template_has_hop_limit_1(plans, stack):
    """The launch template pulumi-eks builds in each node group (modelled offline, after the node
    group's transforms): session tokens and hop limit 1, so no pod reaches the node role."""
    plan = plans[stack]
    templates = {r.parent: r for r in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    groups = plan.of_type(MNG)
    assert len(groups) == 3  # the system nodes and both GPU pools
    for group in groups:
        assert templates[group.urn].inputs["metadataOptions"] == {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 1,
        }, group.name


def test_gpu_pool_nodes(dev):
    for group in gpu_groups(dev):
        role = group.name.removesuffix("-gpu")
        i = group.inputs
        assert i["instanceTypes"] == ["g6.8xlarge"]
        assert i["scalingConfig"] == {"minSize": 1, "desiredSize": 1, "maxSize": 1}
        assert i["labels"] == {POOL_NODE_LABEL: role, "nvidia.com/gpu.present": "true"}
        assert i["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
        # The AMI is the pinned release, looked up in SSM at deploy time, never "recommended".
        assert "amiType" not in i and "gpu" not in i
        assert is_placeholder(i["amiId"])
        assert (
            "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/"
            "amazon-eks-node-al2023-x86_64-nvidia-1.35-v20260903/image_id" in i["amiId"]
        )
        (nodeadm,) = i["nodeadmExtraOptions"]
        assert nodeadm["contentType"] == "application/node.eks.aws"
        assert "strategy: RAID0" in nodeadm["content"] and "kind: NodeConfig" in nodeadm["content"]
    assert LOCAL_NVME_ROOT == "/mnt/k8s-disks/0"


def test_explicit_ami_id_needs_no_lookup(plans):
    from offline.plan import run_program

    plan = run_program(
        "dev", {"ray-llm-eks:gpuAmiReleaseVersion": None, "ray-llm-eks:gpuAmiId": "ami-0123456789abcdef0"}
    )
    assert {g.inputs["amiId"] for g in gpu_groups(plan)} == {"ami-0123456789abcdef0"}


@pytest.mark.parametrize(("stack", "nats"), [("dev", 1), ("prod", 3)])
def test_network_layout(plans, stack, nats):
    plan = plans[stack]
    vpc = plan.one("aws:ec2/vpc:Vpc")
    subnets = plan.of_type(SUBNET)
    zones = plan.one(CLUSTER).inputs["privateSubnetIds"]
    assert len(subnets) == 2 * len(zones)
    blocks = [ipaddress.IPv4Network(s.inputs["cidrBlock"]) for s in subnets]
    assert all(b.subnet_of(ipaddress.IPv4Network(vpc.inputs["cidrBlock"])) for b in blocks)
    assert not any(a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    # Pods take VPC IPs: each private subnet holds thousands of addresses.
    private = [s for s in subnets if is_private(s)]
    assert all(ipaddress.IPv4Network(s.inputs["cidrBlock"]).num_addresses >= 4096 for s in private)
    for s in subnets:
        assert s.inputs["tags"][f"kubernetes.io/cluster/{plan.outputs['clusterName']}"] == "shared"
    assert len(plan.of_type("aws:ec2/natGateway:NatGateway")) == nats
    # Every private route table sends egress through a NAT gateway of this stack.
    nat_ids = {n.id for n in plan.of_type("aws:ec2/natGateway:NatGateway")}
    private_rts = [r for r in plan.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    assert len(private_rts) == len(zones)
    assert {rt.inputs["routes"][0]["natGatewayId"] for rt in private_rts} == nat_ids


def test_dependency_order(dev):
    """Create: network -> cluster -> node groups -> provider users. Destroy runs it backwards."""
    cluster = dev.one(CLUSTER).urn
    for nat in dev.of_type("aws:ec2/natGateway:NatGateway"):
        assert dev.depends_on(cluster, nat.urn)
    for group in dev.of_type(MNG):
        assert dev.depends_on(group.urn, cluster)
    provider = dev.one("pulumi:providers:kubernetes")
    assert dev.depends_on(provider.urn, cluster)
    chain = [r.type for r in dev.longest_chain()]
    assert chain[0] == "aws:ec2/vpc:Vpc" and chain.index(CLUSTER) < chain.index(MNG)
    # The internal NLB's Service comes after the RayService, before it on destroy.
    assert chain.index(CLUSTER) < chain.index(MNG)
    service = dev.one("kubernetes:core/v1:Service", "internal-endpoint")
    assert dev.depends_on(service.urn, dev.one("kubernetes:ray.io/v1:RayService").urn)


def test_components_follow_the_conventions(dev):
    components = [r for r in dev.registrations if not r.custom and not r.remote]
    assert {r.type.split(":")[0] for r in components} == {"ray-llm-eks"}
    for r in dev.registrations:
        if r.type.startswith(("aws:", "eks:")) and "modelled" not in r.options:  # pulumi-eks's own children
            assert r.parent is not None and dev.by_urn[r.parent].type.startswith("ray-llm-eks:"), r.urn


def test_outputs(plans):
    for plan in plans.values():
        out = plan.outputs
        assert out["kubeconfig"] == "[secret]"
        assert set(out) >= {"region", "clusterName", "gpuAvailabilityZone", "gpuSubnetId"}
        expected_roles = set(json.loads(load_stack(plan.stack, ROOT).values["ray-llm-eks:gpuPools"]))
        assert set(out["gpuNodeGroupNames"]) == expected_roles
        assert all(is_placeholder(v) for v in out["gpuNodeGroupNames"].values())
    assert plans["dev"].outputs["region"] == "us-east-1"


def test_deploy_time_values_are_placeholders_never_invented(plans):
    """Every id the offline plan shows for a real resource is the one placeholder format."""
    for plan in plans.values():
        for r in plan.registrations:
            if r.custom:
                assert is_placeholder(r.id), r.urn
        text = json.dumps(plan.resources_json())
        own_ami = load_stack(plan.stack, ROOT).values.get("ray-llm-eks:gpuAmiId", "no AMI id set")
        assert "ami-0" not in text.replace(own_ami, "") and "arn:aws:eks" not in text


def test_node_group_enums_are_what_the_eks_api_accepts(plans):
    """Values the EKS API validates at deploy time, checked against its botocore model now."""
    import botocore.loaders

    shapes = botocore.loaders.Loader().load_service_model("eks", "service-2")["shapes"]
    for plan in plans.values():
        for group in plan.of_type(MNG):
            if "amiType" in group.inputs:
                assert group.inputs["amiType"] in shapes["AMITypes"]["enum"]
            for taint in group.inputs.get("taints", []):
                assert taint["effect"] in shapes["TaintEffect"]["enum"]
        assert plan.one(CLUSTER).inputs["authenticationMode"] in shapes["AuthenticationMode"]["enum"]
