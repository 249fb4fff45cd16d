"""Network: the VPC, one public and one private subnet per AZ, NAT, routes and the tags EKS uses.

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.platform.field_checks import (
    check_availability_zones,
    check_cluster_name,
    check_gpu_availability_zone,
    check_nat_gateways,
    check_region,
    check_vpc_cidr,
)
from ray_llm_eks.domain.platform.subnets import private_subnet_name, public_subnet_name, subnet_cidrs

ARGS = "NetworkArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())


@dataclass(frozen=True)
class NetworkArgs:
    """The VPC's layout: one public and one private subnet per zone; GPU nodes only in the GPU zone's."""

    cluster_name: str
    """The EKS cluster's name: the subnets carry its kubernetes.io/cluster/<name> tag (config key clusterName)."""
    region: str
    """The AWS region: the zones' prefix and the S3 gateway endpoint's service name."""
    availability_zones: Sequence[str] | None = None
    """2 or 3 zones of the region (config key availabilityZones); none: <region>a and <region>b."""
    gpu_availability_zone: str | None = None
    """The zone of every EFA node, one of availability_zones (config key gpuAvailabilityZone); none: the first."""
    vpc_cidr: str | None = default("vpcCidr")
    """The VPC's private (RFC 1918) /16 to /20 block, not on 172.17.0.0/16 (config key vpcCidr)."""
    nat_gateways: str | None = default("natGateways")
    """single (one NAT, in the GPU zone) or perAz (one per zone) (config key natGateways)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_cluster_name("cluster_name", self.cluster_name, ARGS)
        check_region("region", self.region, botocore_facts.load(), ARGS)
        zones = self.availability_zones
        if zones is None:
            zones = [f"{self.region}a", f"{self.region}b"]
        object.__setattr__(
            self, "availability_zones", check_availability_zones("availability_zones", zones, self.region, ARGS)
        )
        if self.gpu_availability_zone is None:
            object.__setattr__(self, "gpu_availability_zone", self.availability_zones[0])
        check_gpu_availability_zone("gpu_availability_zone", self.gpu_availability_zone, self.availability_zones, ARGS)
        object.__setattr__(self, "vpc_cidr", check_vpc_cidr("vpc_cidr", self.vpc_cidr, ARGS))
        check_nat_gateways("nat_gateways", self.nat_gateways, ARGS)


class Network(pulumi.ComponentResource):
    """VPC for the cluster. `gpu_subnet_id` is the one private subnet every EFA node goes in:
    EFA (OS-bypass) traffic cannot leave its subnet."""

    TYPE = "ray-llm-eks:network:Network"  # the shipped program's resources keep their URNs

    vpc_id: pulumi.Output[str]
    """The VPC's id."""
    gpu_subnet_id: pulumi.Output[str]
    """The private subnet of the GPU zone, where every EFA node goes."""
    private_subnet_ids: list[pulumi.Output[str]]
    """The private subnets, one per zone: the nodes', the pods' and the GCS store's."""
    public_subnet_ids: list[pulumi.Output[str]]
    """The public subnets, one per zone: the NAT gateways' and internet-facing load balancers'."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        region = args.region
        child = pulumi.ResourceOptions(parent=self)
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,  # EKS private endpoint and nodes need both
            enable_dns_support=True,
            tags={"Name": f"{args.cluster_name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            opts=child,
        )

        private_cidrs, public_cidrs = subnet_cidrs(args.vpc_cidr, len(args.availability_zones))
        # The single NAT sits in the GPU AZ: model and image downloads then stay in one AZ.
        nat_zones = list(args.availability_zones) if args.nat_gateways == "perAz" else [args.gpu_availability_zone]
        self.private_subnets: dict[str, aws.ec2.Subnet] = {}
        self.public_subnets: dict[str, aws.ec2.Subnet] = {}
        nats: dict[str, aws.ec2.NatGateway] = {}
        for az, public_cidr in zip(args.availability_zones, public_cidrs, strict=True):
            public = aws.ec2.Subnet(
                f"{name}-public-{az}",
                vpc_id=self.vpc.id,
                cidr_block=public_cidr,
                availability_zone=az,
                map_public_ip_on_launch=False,
                tags={
                    **cluster_tag,
                    "kubernetes.io/role/elb": "1",
                    "Name": public_subnet_name(args.cluster_name, az),
                },
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{az}", subnet_id=public.id, route_table_id=public_rt.id, opts=child
            )
            self.public_subnets[az] = public
            if az in nat_zones:
                eip = aws.ec2.Eip(f"{name}-nat-{az}", domain="vpc", opts=child)
                nats[az] = aws.ec2.NatGateway(
                    f"{name}-nat-{az}",
                    allocation_id=eip.id,
                    subnet_id=public.id,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                )

        private_rts = []
        for az, private_cidr in zip(args.availability_zones, private_cidrs, strict=True):
            nat = nats.get(az) or nats[args.gpu_availability_zone]
            private_rt = aws.ec2.RouteTable(
                f"{name}-private-{az}",
                vpc_id=self.vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                opts=child,
            )
            private_rts.append(private_rt)
            subnet = aws.ec2.Subnet(
                f"{name}-private-{az}",
                vpc_id=self.vpc.id,
                cidr_block=private_cidr,
                availability_zone=az,
                tags={
                    **cluster_tag,
                    "kubernetes.io/role/internal-elb": "1",
                    "Name": private_subnet_name(args.cluster_name, az),
                },
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{az}", subnet_id=subnet.id, route_table_id=private_rt.id, opts=child
            )
            self.private_subnets[az] = subnet

        # Image layers (ECR) and model files come from S3: a gateway endpoint keeps them off the
        # NAT gateway's per-GB charge. It is free.
        s3_prefix = (
            "cn.com.amazonaws" if botocore_facts.load().region_partition(region) == "aws-cn" else "com.amazonaws"
        )
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=f"{s3_prefix}.{region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_rts],
            opts=child,
        )

        self.gpu_availability_zone = args.gpu_availability_zone
        self.vpc_id = self.vpc.id
        self.gpu_subnet_id = self.private_subnets[args.gpu_availability_zone].id
        self.private_subnet_ids = [s.id for s in self.private_subnets.values()]
        self.public_subnet_ids = [s.id for s in self.public_subnets.values()]
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "gpuSubnetId": self.gpu_subnet_id,
                "privateSubnetIds": self.private_subnet_ids,
                "publicSubnetIds": self.public_subnet_ids,
            }
        )
