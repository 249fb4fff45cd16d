"""The internal endpoint (ray_llm_eks/components/load_balancer.py): an internal NLB with source ranges through the
AWS Load Balancer Controller (Helm, EKS Pod Identity), in the graph so `destroy` removes it first."""

from __future__ import annotations

import ipaddress
import json

import pytest

from offline.mocks import placeholder
from offline.plan import run_program
from ray_llm_eks.components.load_balancer import ANNOTATION, SUBNETS
from tests.conftest import failing_run

SERVICE = "kubernetes:core/v1:Service"


def test_dev_plan_has_an_internal_nlb_with_source_ranges(dev):
    service = dev.one(SERVICE, "internal-endpoint")
    meta, spec = service.inputs["metadata"], service.inputs["spec"]
    assert meta["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert spec["type"] == "LoadBalancer" and spec["loadBalancerClass"] == "service.k8s.aws/nlb"
    assert spec["loadBalancerSourceRanges"] == ["10.0.128.0/17"]  # dev's VPC less its two private /18s, the default
    assert spec["ports"] == [{"name": "serve", "port": 8000, "protocol": "TCP", "targetPort": 8000}]
    assert dev.outputs["internalEndpointUrl"].startswith("http://<known after deploy: ")


def test_the_nlb_goes_before_the_controller_and_the_rayservice_on_destroy(dev):
    service = dev.one(SERVICE, "internal-endpoint")
    controller = dev.one("kubernetes:helm.sh/v3:Release", "aws-load-balancer-controller")
    assert dev.depends_on(service.urn, controller.urn)
    assert dev.depends_on(service.urn, dev.one("kubernetes:ray.io/v1:RayService").urn)


def test_controller_chart_version_is_set_from_the_stack_like_the_other_charts():
    plan = run_program("dev", {"ray-llm-eks:loadBalancerControllerVersion": "3.4.1"})
    release = plan.one("kubernetes:helm.sh/v3:Release", "aws-load-balancer-controller")
    assert release.inputs["version"] == "3.4.1"


def test_controller_is_pinned_and_gets_its_role_through_pod_identity(dev):
    release = dev.one("kubernetes:helm.sh/v3:Release", "aws-load-balancer-controller")
    assert (release.inputs["chart"], release.inputs["version"]) == ("aws-load-balancer-controller", "3.5.0")
    assert release.inputs["values"]["serviceAccount"] == {"create": True, "name": "aws-load-balancer-controller"}
    association = dev.one("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
        "kube-system",
        "aws-load-balancer-controller",
    )
    assert dev.depends_on(release.urn, association.urn)
    role = dev.one("aws:iam/role:Role", "lb-controller-role")
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert dev.one("aws:eks/addon:Addon", "pod-identity-agent").inputs["addonName"] == "eks-pod-identity-agent"


def test_pods_admit_the_nlb_on_the_serve_port_only(dev):
    policies = {
        r.inputs["metadata"]["name"]: r.inputs for r in dev.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    }
    rule = policies["serve-port-from-load-balancer"]["spec"]["ingress"]
    blocks = [{"ipBlock": {"cidr": c}} for c in ("10.0.192.0/20", "10.0.208.0/20")]  # dev's two public subnets
    assert rule == [{"from": blocks, "ports": [{"port": 8000, "protocol": "TCP"}]}]


def test_the_load_balancer_rule_admits_the_nlbs_subnets_and_no_pod_address(plans):
    """The NLB sits in the public subnets, where no node (so no pod, VPC CNI) lives, and does not
    pass the client's address on: the policy's blocks are exactly those subnets, none overlaps a
    subnet a node group uses, so `serveClientNamespaces` decides which pods reach the serve port."""
    for stack, plan in plans.items():
        services = [r for r in plan.of_type(SERVICE) if r.name == "internal-endpoint"]
        if not services:
            continue
        (service,) = services
        annotations = service.inputs["metadata"]["annotations"]
        # AWS may not take subnets off a running NLB: a new subnet list makes a new Service and NLB.
        assert service.options["replaceOnChanges"] == [f'metadata.annotations["{SUBNETS}"]'], stack
        assert service.options["deleteBeforeReplace"] is True, stack
        assert annotations[f"{ANNOTATION}-target-group-attributes"] == "preserve_client_ip.enabled=false", stack
        subnets = {s.inputs["tags"]["Name"]: s for s in plan.of_type("aws:ec2/subnet:Subnet")}
        named = annotations[SUBNETS].split(",")
        assert all(subnets[n].inputs["tags"].get("kubernetes.io/role/elb") == "1" for n in named), stack
        policies = plan.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        (policy,) = [p for p in policies if p.inputs["metadata"]["name"] == "serve-port-from-load-balancer"]
        (rule,) = policy.inputs["spec"]["ingress"]
        admitted = {b["ipBlock"]["cidr"] for b in rule["from"]}
        assert admitted == {subnets[n].inputs["cidrBlock"] for n in named}, stack
        # Every other subnet of the VPC, the private ones that node groups (and so pods) use among them.
        pod_networks = [ipaddress.ip_network(s.inputs["cidrBlock"]) for n, s in subnets.items() if n not in named]
        assert pod_networks, stack
        assert not any(ipaddress.ip_network(c).overlaps(p) for c in admitted for p in pod_networks), stack


def _pod_networks(plan, stack: str) -> list:
    """Where pods get addresses (VPC CNI): the private subnets, every node group's among them."""
    subnets = plan.of_type("aws:ec2/subnet:Subnet")
    private = {s.id: s for s in subnets if "kubernetes.io/role/internal-elb" in s.inputs["tags"]}
    for group in plan.of_type("eks:index:ManagedNodeGroup"):
        assert set(group.inputs["subnetIds"]) <= set(private), (stack, group.name)
    return [ipaddress.ip_network(s.inputs["cidrBlock"]) for s in private.values()]


def test_the_nlb_admits_no_pod_address_by_default(plans):
    """The NLB's security group (loadBalancerSourceRanges, through the controller) admits the VPC less
    the pod subnets: a pod of any namespace cannot reach the serve port through the NLB, so
    `serveClientNamespaces` is the pods' only way in."""
    checked = 0
    for stack, plan in plans.items():
        services = [r for r in plan.of_type(SERVICE) if r.name == "internal-endpoint"]
        if not services:
            continue
        (service,) = services
        ranges = [ipaddress.ip_network(c) for c in service.inputs["spec"]["loadBalancerSourceRanges"]]
        pods = _pod_networks(plan, stack)
        assert pods and not any(r.overlaps(p) for r in ranges for p in pods), stack
        vpc = ipaddress.ip_network(plan.one("aws:ec2/vpc:Vpc").inputs["cidrBlock"])
        assert list(ipaddress.collapse_addresses(ranges + pods)) == [vpc], stack  # nothing else of the VPC left out
        checked += 1
    assert checked >= 3


def test_a_source_range_holding_pod_addresses_is_refused():
    error, monitor = failing_run({"ray-llm-eks:endpointSourceRanges": ["10.0.192.0/18", "10.0.0.0/8"]})
    assert monitor.registrations == []  # refused before anything is declared
    assert str(error) == (
        "invalid config ray-llm-eks:endpointSourceRanges = 10.0.0.0/8: CIDR blocks outside the pod subnets "
        "[10.0.0.0/18, 10.0.64.0/18] (pods get in through serveClientNamespaces)"
    )
    outside = run_program("dev", {"ray-llm-eks:endpointSourceRanges": ["10.0.192.0/18", "172.31.0.0/16"]})
    spec = outside.one(SERVICE, "internal-endpoint").inputs["spec"]
    assert spec["loadBalancerSourceRanges"] == ["10.0.192.0/18", "172.31.0.0/16"]  # a peered VPC's, say


def test_internal_endpoint_off_declares_no_load_balancer():
    plan = run_program("dev", {"ray-llm-eks:internalEndpoint": False})
    assert plan.of_type(SERVICE) == [] and plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation") == []
    assert "internalEndpointUrl" not in plan.outputs


def test_pod_identity_agent_version_is_ekss_default_for_the_clusters_minor(dev):
    """Pinned at deploy time (no source lists it per minor): a placeholder offline, never left unset."""
    for plan, minor in ((dev, "1.35"), (run_program("dev", {"ray-llm-eks:kubernetesVersion": "1.36"}), "1.36")):
        version = plan.one("aws:eks/addon:Addon", "pod-identity-agent").inputs.get("addonVersion")
        assert version == placeholder(f"default eks-pod-identity-agent version for Kubernetes {minor}")


def test_one_pod_identity_agent_serves_both_controllers(plans):
    """EKS allows the eks-pod-identity-agent add-on once per cluster: the autoscaler and the load
    balancer controller wait for the same one."""
    xpyd = plans["xpyd"]
    agent = xpyd.one("aws:eks/addon:Addon", "pod-identity-agent")
    releases = {r.name: r for r in xpyd.of_type("kubernetes:helm.sh/v3:Release")}
    for name in ("cluster-autoscaler", "aws-load-balancer-controller"):
        assert xpyd.depends_on(releases[name].urn, agent.urn), name


def test_the_controller_role_holds_its_published_policy_scoped_to_this_cluster(dev):
    """No ElasticLoadBalancingFullAccess, no tag writes without a condition: the controller's own policy, each
    cluster-tag condition naming this stack's cluster (ray_llm_eks/domain/security/load_balancer_policy.py)."""
    attached = [r.inputs["policyArn"] for r in dev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")]
    assert not [arn for arn in attached if "ElasticLoadBalancing" in arn]
    (policy,) = [r for r in dev.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.startswith("lb-controller")]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    create_tags = [s for s in statements if "ec2:CreateTags" in s["Action"]]
    assert create_tags and all("Condition" in s for s in create_tags)
    tag_keys = ("aws:RequestTag/elbv2.k8s.aws/cluster", "aws:ResourceTag/elbv2.k8s.aws/cluster")
    conditions = [s.get("Condition", {}) for s in statements]
    named = [c["StringEquals"][k] for c in conditions for k in tag_keys if k in c.get("StringEquals", {})]
    assert named and set(named) == {"ray-llm-dev"}
    assert not [c for c in conditions for k in tag_keys if c.get("Null", {}).get(k) == "false"]  # no "any cluster"
    assert policy.name == "lb-controller-policy"


CERT = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def test_the_nlb_service_allocates_no_node_port_and_targets_the_pods_ips(plans):
    """A node port would be a way to the serve port that no NetworkPolicy closes; IP targets need none."""
    for stack, plan in plans.items():
        for service in [r for r in plan.of_type(SERVICE) if r.name == "internal-endpoint"]:
            assert service.inputs["spec"]["allocateLoadBalancerNodePorts"] is False, stack
            assert service.inputs["metadata"]["annotations"][f"{ANNOTATION}-nlb-target-type"] == "ip", stack


def test_a_certificate_gives_the_nlb_a_tls_listener_and_no_plain_one():
    plan = run_program("dev", {"ray-llm-eks:endpointCertificateArn": CERT})
    service = plan.one(SERVICE, "internal-endpoint")
    annotations, spec = service.inputs["metadata"]["annotations"], service.inputs["spec"]
    assert spec["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8000}]
    assert annotations[f"{ANNOTATION}-ssl-cert"] == CERT
    assert annotations[f"{ANNOTATION}-ssl-ports"] == "https"
    assert annotations[f"{ANNOTATION}-ssl-negotiation-policy"] == "ELBSecurityPolicy-TLS13-1-2-2021-06"
    assert plan.outputs["internalEndpointUrl"].startswith("https://<known after deploy: ")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"ray-llm-eks:endpointCertificateArn": CERT.replace("us-east-1", "us-west-2")},
            "certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d: an ACM certificate ARN of the stack's region, "
            "such as arn:aws:acm:us-east-1:123456789012:certificate/<uuid>",
        ),
        ({"ray-llm-eks:endpointCertificateArn": "my-cert"}, "endpointCertificateArn = my-cert: an ACM certificate ARN"),
        (
            {"ray-llm-eks:endpointCertificateArn": CERT, "ray-llm-eks:internalEndpoint": False},
            "left out: the stack has no internal endpoint to put it on",
        ),
    ],
)
def test_a_certificate_of_another_region_or_no_certificate_at_all_is_refused(overrides, message):
    error, _ = failing_run(overrides)
    assert message in str(error)


def test_every_pod_identity_role_is_trusted_for_its_own_service_account_only(plans):
    """Each role EKS Pod Identity assumes names the account, the cluster, the namespace and the service account
    its association is for (ray_llm_eks/components/pod_identity.py)."""
    for stack, plan in plans.items():
        associations = {
            (a.inputs["namespace"], a.inputs["serviceAccount"])
            for a in plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        }
        for role in plan.of_type("aws:iam/role:Role"):
            trust = json.loads(role.inputs["assumeRolePolicy"])
            (statement,) = trust["Statement"]
            if statement["Principal"] != {"Service": "pods.eks.amazonaws.com"}:
                continue
            tags = statement["Condition"]["StringEquals"]
            assert tags["aws:SourceAccount"].startswith("<known after deploy: "), (stack, role.name)
            assert tags["aws:RequestTag/eks-cluster-name"] == f"ray-llm-{stack}", (stack, role.name)
            owner = (tags["aws:RequestTag/kubernetes-namespace"], tags["aws:RequestTag/kubernetes-service-account"])
            assert owner in associations or owner == ("kube-system", "ebs-csi-controller-sa"), (stack, role.name)
