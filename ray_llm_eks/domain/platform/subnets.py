"""The VPC's subnet layout (ray_llm_eks/components/network.py builds it): which addresses pods can take and which
only load balancers and NAT gateways hold, as the NetworkPolicies must tell them apart."""

from __future__ import annotations

import ipaddress


def subnet_cidrs(vpc_cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """Private subnets get a quarter of the VPC each (pods take VPC IPs with the VPC CNI); public
    subnets, which hold only NAT gateways and load balancers (never a node, so never a pod), share
    the last quarter."""
    vpc = ipaddress.IPv4Network(vpc_cidr)
    quarters = list(vpc.subnets(prefixlen_diff=2))
    private = [str(q) for q in quarters[:zones]]
    public = [str(s) for s in quarters[3].subnets(prefixlen_diff=2)][:zones]
    return private, public


def pod_subnet_cidrs(vpc_cidr: str, zones: int) -> list[str]:
    """Where nodes, and so pods (VPC CNI), get addresses: the private subnets, every node group's and
    Karpenter's (ray_llm_eks/components/cluster.py, gpu_nodes.py, karpenter.py)."""
    return subnet_cidrs(vpc_cidr, zones)[0]


def outside_pod_subnets(vpc_cidr: str, pod_subnets: list[str]) -> list[str]:
    """The VPC less the pod subnets, in the fewest CIDR blocks: addresses inside the VPC no pod can hold."""
    remaining = [ipaddress.IPv4Network(vpc_cidr)]
    for pods in map(ipaddress.IPv4Network, pod_subnets):
        remaining = [part for block in remaining for part in _without(block, pods)]
    return [str(n) for n in ipaddress.collapse_addresses(remaining)]


def _without(block: ipaddress.IPv4Network, pods: ipaddress.IPv4Network) -> list[ipaddress.IPv4Network]:
    if pods.subnet_of(block):
        return list(block.address_exclude(pods))
    return [] if block.subnet_of(pods) else [block]


def public_subnet_name(cluster_name: str, zone: str) -> str:
    """The public subnet's Name tag, by which the load balancer Service names its subnets."""
    return f"{cluster_name}-public-{zone}"


def private_subnet_name(cluster_name: str, zone: str) -> str:
    """The private subnet's Name tag, by which Karpenter's node classes select the GPU zone's subnet."""
    return f"{cluster_name}-private-{zone}"


def load_balancer_subnets(cluster_name: str, vpc_cidr: str, zones: tuple[str, ...]) -> dict[str, str]:
    """The subnets the internal NLB goes in, by Name tag, with their CIDRs: the public ones, where no pod lives."""
    _, public = subnet_cidrs(vpc_cidr, len(zones))
    return {public_subnet_name(cluster_name, z): cidr for z, cidr in zip(zones, public, strict=True)}
