"""The internal endpoint (components/load_balancer.py): an internal NLB with source ranges through the
AWS Load Balancer Controller (Helm, EKS Pod Identity), in the graph so `destroy` removes it first."""

from __future__ import annotations

import ipaddress
import json

from components.load_balancer import ANNOTATION, SUBNETS
from offline.mocks import placeholder
from offline.plan import run_program

SERVICE = "kubernetes:core/v1:Service"


def test_dev_plan_has_an_internal_nlb_with_source_ranges(dev):
    service = dev.one(SERVICE, "internal-endpoint")
    meta, spec = service.inputs["metadata"], service.inputs["spec"]
    assert meta["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert spec["type"] == "LoadBalancer" and spec["loadBalancerClass"] == "service.k8s.aws/nlb"
    assert spec["loadBalancerSourceRanges"] == ["10.0.0.0/16"]  # dev's VPC, the default
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
