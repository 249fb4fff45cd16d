"""Every invalid stack value is refused with one message naming the key, the value and what is allowed:
the settings checks called directly, through the one stack adapter. That the program runs them before
declaring any resource: tests/plan/components/test_preflight.py test_bad_prices_fail_before_any_resource."""

from __future__ import annotations

import pytest

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.loading.config import load_settings
from tests.conftest import ROOT, settings_error

NS = "ray-llm-eks:"
GPU = {"instanceType": "g6.8xlarge", "minSize": 1, "desiredSize": 1, "maxSize": 1}


def pools(**prefill) -> dict:
    return {"prefill": {**GPU, **prefill}, "decode": GPU}


# (overrides, key named in the message, value named in the message, a word of the rule)
INVALID = {
    "malformed instance type": (
        {NS + "gpuPools": pools(instanceType="g6_8xlarge")},
        "gpuPools.prefill.instanceType",
        "g6_8xlarge",
        "family.size",
    ),
    "unknown instance type": (
        {NS + "gpuPools": pools(instanceType="g6.8xlarg")},
        "gpuPools.prefill.instanceType",
        "g6.8xlarg",
        "EC2 API knows",
    ),
    "unknown system instance type": (
        {NS + "systemNodes": {"instanceType": "m7i.xlargee"}},
        "systemNodes.instanceType",
        "m7i.xlargee",
        "EC2 API knows",
    ),
    "GPU type without EFA": (
        {NS + "gpuPools": pools(instanceType="g6.xlarge")},
        "gpuPools.prefill.instanceType",
        "g6.xlarge",
        "with EFA",
    ),
    "GPU pool without GPU": (
        {NS + "gpuPools": pools(instanceType="m7i.xlarge")},
        "gpuPools.prefill.instanceType",
        "m7i.xlarge",
        "NVIDIA GPUs",
    ),
    "GPU type not in our hardware table": (
        {NS + "gpuPools": pools(instanceType="c7i.large")},
        "gpuPools.prefill.instanceType",
        "c7i.large",
        "aws_facts.py",
    ),
    "min above desired": (
        {NS + "gpuPools": pools(minSize=2, desiredSize=1, maxSize=3)},
        "gpuPools.prefill",
        "{minSize: 2, desiredSize: 1, maxSize: 3}",
        "minSize <= desiredSize <= maxSize",
    ),
    "desired above max": (
        {NS + "systemNodes": {"instanceType": "m7i.xlarge", "minSize": 1, "desiredSize": 4, "maxSize": 2}},
        "systemNodes",
        "{minSize: 1, desiredSize: 4, maxSize: 2}",
        "minSize <= desiredSize <= maxSize",
    ),
    "negative count": (
        {NS + "gpuPools": pools(minSize=-1)},
        "gpuPools.prefill.minSize",
        "-1",
        "0 or more",
    ),
    "count of the wrong type": (
        {NS + "gpuPools": pools(maxSize="two")},
        "gpuPools.prefill.maxSize",
        "= two",
        "a whole number",
    ),
    "AZ of another region": (
        {NS + "availabilityZones": ["us-east-1a", "us-west-2b"]},
        "availabilityZones",
        "us-west-2b",
        "zones of region us-east-1",
    ),
    "one AZ only": (
        {NS + "availabilityZones": ["us-east-1a"], NS + "gpuAvailabilityZone": "us-east-1a"},
        "availabilityZones",
        "us-east-1a",
        "2 or 3 distinct zones",
    ),
    "GPU AZ not among the zones": (
        {NS + "gpuAvailabilityZone": "us-east-1c"},
        "gpuAvailabilityZone",
        "us-east-1c",
        "one of availabilityZones",
    ),
    "malformed VPC CIDR": ({NS + "vpcCidr": "10.0.0.0/33"}, "vpcCidr", "10.0.0.0/33", "IPv4 CIDR"),
    "VPC CIDR with host bits": ({NS + "vpcCidr": "10.0.0.1/16"}, "vpcCidr", "10.0.0.1/16", "IPv4 CIDR"),
    "public VPC CIDR": ({NS + "vpcCidr": "8.8.0.0/16"}, "vpcCidr", "8.8.0.0/16", "RFC 1918"),
    "VPC too small for pods": ({NS + "vpcCidr": "10.0.0.0/24"}, "vpcCidr", "10.0.0.0/24", "/16 to /20"),
    "VPC on the Docker bridge": ({NS + "vpcCidr": "172.17.0.0/16"}, "vpcCidr", "172.17.0.0/16", "Docker"),
    "service CIDR overlapping the VPC": (
        {NS + "serviceCidr": "10.0.128.0/20"},
        "serviceCidr",
        "10.0.128.0/20",
        "does not overlap vpcCidr",
    ),
    "malformed endpoint CIDR": (
        {NS + "endpointPublicAccessCidrs": ["1.2.3.4/40"]},
        "endpointPublicAccessCidrs",
        "1.2.3.4/40",
        "IPv4 CIDR",
    ),
    "admin ARN of an assumed-role session": (
        {NS + "clusterAdmins": ["arn:aws:sts::123456789012:assumed-role/ci/run"]},
        "clusterAdmins",
        "assumed-role/ci/run",
        "IAM role or user ARNs of partition aws",
    ),
    "admin ARN of another partition": (
        {NS + "clusterAdmins": ["arn:aws-cn:iam::123456789012:role/ci"]},
        "clusterAdmins",
        "arn:aws-cn:iam",
        "partition aws",
    ),
    "admin listed twice": (
        {NS + "clusterAdmins": ["arn:aws:iam::123456789012:user/a", "arn:aws:iam::123456789012:user/a"]},
        "clusterAdmins",
        "user/a",
        "distinct ARNs",
    ),
    "unpinned load balancer controller chart": (
        {NS + "loadBalancerControllerVersion": "latest"},
        "loadBalancerControllerVersion",
        "latest",
        "an exact version of the aws-load-balancer-controller chart",
    ),
    "unknown EKS version": ({NS + "kubernetesVersion": "1.99"}, "kubernetesVersion", "1.99", "one of"),
    "system disk too small for the serving image": (
        {NS + "systemNodes": {"instanceType": "m7i.xlarge", "diskSizeGiB": 80}},
        "systemNodes.diskSizeGiB",
        "80",
        "at least 90 GiB",
    ),
    "system node the head cannot fit, checked offline": (
        {NS + "systemNodes": {"instanceType": "t3.small"}},
        "systemNodes.instanceType",
        "t3.small",
        "room for the Ray head",
    ),
    "typo in a pool field": (
        {NS + "gpuPools": {"prefill": {**GPU, "maxSzie": 2}, "decode": GPU}},
        "gpuPools.prefill.maxSzie",
        "= 2",
        "not a field of gpuPools.prefill; did you mean maxSize?",
    ),
    "typo in a pool role": (
        {NS + "gpuPools": {"prefil": GPU, "decode": GPU}},
        "gpuPools.prefil",
        "g6.8xlarge",
        "pool role",
    ),
    "pools not a mapping": ({NS + "gpuPools": ["g6.8xlarge"]}, "gpuPools", "g6.8xlarge", "mapping"),
    "unpinned GPU AMI": ({NS + "gpuAmiReleaseVersion": None}, "gpuAmiReleaseVersion", "(not set)", "exactly one"),
    "malformed AMI release": (
        {NS + "gpuAmiReleaseVersion": "latest"},
        "gpuAmiReleaseVersion",
        "latest",
        "v20261112",
    ),
    "unknown NAT mode": ({NS + "natGateways": "two"}, "natGateways", "two", "single"),
    "log retention CloudWatch refuses": (
        {NS + "clusterLogRetentionDays": 10},
        "clusterLogRetentionDays",
        "10",
        "one of",
    ),
    "unknown log type": (
        {NS + "clusterLogTypes": ["api", "kubelet"]},
        "clusterLogTypes",
        "kubelet",
        "EKS log types",
    ),
    "bad cluster name": ({NS + "clusterName": "1-cluster"}, "clusterName", "1-cluster", "starting with a letter"),
    "unknown region": ({"aws:region": "us-moon-1"}, "aws:region", "us-moon-1", "region"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_value_is_refused_in_one_line(case):
    overrides, key, value, rule = INVALID[case]
    error = settings_error(overrides)
    assert isinstance(error, ConfigError)
    message = str(error)
    assert key in message and value in message and rule in message, message
    assert message.count("\n") == 0


def test_defaults_fill_what_a_stack_leaves_out():
    values = {
        "gpuPools": '{"prefill": {"instanceType": "g6.8xlarge"}, "decode": {"instanceType": "g6.12xlarge"}}',
        "gpuAmiId": "ami-0123456789abcdef0",
        # Required in the default environment (production): ray_llm_eks/domain/security/hardening.py
        "endpointPublicAccessCidrs": '["198.51.100.0/24"]',
    }
    settings = load_settings(values.get, "qa", "eu-west-1", botocore_facts.load())
    assert settings.hardening.environment == "production" and settings.hardening.network_policies
    assert settings.cluster.name == "ray-llm-qa"
    assert settings.network.availability_zones == ("eu-west-1a", "eu-west-1b")
    assert settings.network.gpu_availability_zone == "eu-west-1a"
    assert settings.cluster.system_nodes.instance_type == "m7i.xlarge"
    decode = settings.gpu_pools["decode"]
    assert (decode.nodes.min_size, decode.nodes.desired_size, decode.nodes.max_size) == (1, 1, 1)
    assert decode.ami.ami_id == "ami-0123456789abcdef0" and decode.ami.release_version is None


def test_max_num_seqs_is_recorded_as_derived_only_where_the_fit_wrote_it():
    """A role whose max_num_seqs neither the stack nor the serve file set gets one from the fit: the idle-GPU
    advice may derive it again for another tensor parallel size (fit/pool_use.py); one the stack set stays."""
    from ray_llm_eks.adapters.stack import load_settings as load_stack_settings
    from ray_llm_eks.adapters.stack import stack_file

    def derived(stack: str, **overrides) -> set[str]:
        return set(
            load_stack_settings(stack_file(stack, ROOT, overrides=overrides or None)).serving.max_num_seqs_derived
        )

    assert derived("baseline") == {"collocated"}
    assert derived("dev") == {"prefill", "decode"}
    assert derived("dev", maxNumSeqs="8") == set()


def test_an_existing_cluster_needs_no_gpu_ami_of_the_stack():
    """Its node groups are the cluster's, with their own AMI: nothing asks the stack for one; a stack that builds
    its node groups still must pin it."""
    from tests.conftest import settings_of

    unpinned = {NS + "gpuAmiReleaseVersion": None}
    pools = settings_of({**unpinned, NS + "existingCluster": True}).gpu_pools.values()
    assert {(p.ami.release_version, p.ami.ami_id) for p in pools} == {(None, None)}
    error = settings_error(unpinned)
    assert error.key == "gpuAmiReleaseVersion" and "exactly one of gpuAmiReleaseVersion" in error.allowed
