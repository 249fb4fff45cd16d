"""Network: the VPC, one public and one private subnet per AZ, NAT, routes and the tags EKS uses."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from adapters import botocore_facts
from domain.settings import NetworkSettings
from domain.subnets import public_subnet_name, subnet_cidrs


class Network(pulumi.ComponentResource):
    """VPC for the cluster. `gpu_subnet_id` is the one private subnet every EFA node goes in:
    EFA (OS-bypass) traffic cannot leave its subnet."""

    def __init__(self, name: str, settings: NetworkSettings, region: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster_tag = {f"kubernetes.io/cluster/{settings.cluster_name}": "shared"}

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=settings.vpc_cidr,
            enable_dns_hostnames=True,  # EKS private endpoint and nodes need both
            enable_dns_support=True,
            tags={"Name": f"{settings.cluster_name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            opts=child,
        )

        private_cidrs, public_cidrs = subnet_cidrs(settings.vpc_cidr, len(settings.availability_zones))
        # The single NAT sits in the GPU AZ: model and image downloads then stay in one AZ.
        nat_zones = (
            list(settings.availability_zones) if settings.nat_gateways == "perAz" else [settings.gpu_availability_zone]
        )
        self.private_subnets: dict[str, aws.ec2.Subnet] = {}
        self.public_subnets: dict[str, aws.ec2.Subnet] = {}
        nats: dict[str, aws.ec2.NatGateway] = {}
        for az, public_cidr in zip(settings.availability_zones, public_cidrs, strict=True):
            public = aws.ec2.Subnet(
                f"{name}-public-{az}",
                vpc_id=self.vpc.id,
                cidr_block=public_cidr,
                availability_zone=az,
                map_public_ip_on_launch=False,
                tags={
                    **cluster_tag,
                    "kubernetes.io/role/elb": "1",
                    "Name": public_subnet_name(settings.cluster_name, az),
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
        for az, private_cidr in zip(settings.availability_zones, private_cidrs, strict=True):
            nat = nats.get(az) or nats[settings.gpu_availability_zone]
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
                    "Name": f"{settings.cluster_name}-private-{az}",
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

        self.gpu_availability_zone = settings.gpu_availability_zone
        self.gpu_subnet_id = self.private_subnets[settings.gpu_availability_zone].id
        self.private_subnet_ids = [s.id for s in self.private_subnets.values()]
        self.public_subnet_ids = [s.id for s in self.public_subnets.values()]
        self.register_outputs(
            {
                "vpcId": self.vpc.id,
                "gpuSubnetId": self.gpu_subnet_id,
                "privateSubnetIds": self.private_subnet_ids,
                "publicSubnetIds": self.public_subnet_ids,
            }
        )
