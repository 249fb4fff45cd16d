"""The internal endpoint: the AWS Load Balancer Controller (Helm, IAM through EKS Pod Identity) and
an internal Network Load Balancer Service in front of the Ray serve port. Both stay in the graph, so
`destroy` deletes the Service (the controller, still running, removes the NLB) before the
controller, the cluster and the VPC.

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.components.pod_identity import ControllerRelease, pod_identity_role, release_with_role
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.facts import SERVE_PORT
from ray_llm_eks.domain.platform.field_checks import (
    check_certificate_arn,
    check_chart_version,
    check_cidr,
    check_cluster_name,
    check_endpoint_source_ranges,
    check_namespace,
    check_region,
    check_service_name,
)
from ray_llm_eks.domain.platform.placement import SYSTEM_LABELS
from ray_llm_eks.domain.platform.versions import LB_CONTROLLER_CHART, ChartPin
from ray_llm_eks.domain.security import load_balancer_policy

SERVICE_ACCOUNT = "aws-load-balancer-controller"
NAMESPACE = "kube-system"
# KubeRay labels a pod whose Serve proxy is healthy with it (ray-operator v1.7.0 utils/constant.go
# RayClusterServingServiceLabelKey), as its own <name>-serve-svc selects.
SERVE_POD_SELECTOR = {"ray.io/is-ray-node": "yes", "ray.io/serve": "true"}
ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer"  # the prefix of the controller's Service annotations
SUBNETS = f"{ANNOTATION}-subnets"


def controller_values(cluster_name: str, region: str, vpc_id: pulumi.Input[str]) -> dict:
    return {
        "clusterName": cluster_name,
        "region": region,
        "vpcId": vpc_id,  # not from instance metadata: IMDSv2's hop limit is for pods we trust less
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "nodeSelector": SYSTEM_LABELS,
        # Only Services that ask for it (loadBalancerClass service.k8s.aws/nlb), not every LoadBalancer.
        "enableServiceMutatorWebhook": False,
    }


# names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())
CONTROLLER_ARGS = "LoadBalancerControllerArgs"


@dataclass(frozen=True)
class LoadBalancerControllerArgs:
    """The controller's chart and the cluster whose load balancers it manages."""

    cluster_name: str
    """The EKS cluster's name: what the controller tags and may change (config key clusterName)."""
    region: str
    """The cluster's AWS region."""
    vpc_id: pulumi.Input[str]
    """The cluster's VPC, given to the controller rather than read from instance metadata."""
    chart_version: str | None = default("loadBalancerControllerVersion")
    """The aws-load-balancer-controller chart's exact version (config key loadBalancerControllerVersion)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_cluster_name("cluster_name", self.cluster_name, CONTROLLER_ARGS)
        check_region("region", self.region, botocore_facts.load(), CONTROLLER_ARGS)
        check_chart_version(
            "chart_version",
            self.chart_version,
            LB_CONTROLLER_CHART[1],
            default("loadBalancerControllerVersion"),
            CONTROLLER_ARGS,
        )


class LoadBalancerController(pulumi.ComponentResource):
    """The controller and its AWS identity: a role only EKS Pod Identity can assume, associated with
    the chart's service account."""

    TYPE = "ray-llm-eks:load_balancer:LoadBalancerController"  # the shipped program's resources keep their URNs

    def __init__(
        self, name: str, args: LoadBalancerControllerArgs, agent: pulumi.Resource, opts: pulumi.ResourceOptions
    ):
        """`agent`: the cluster's EKS Pod Identity agent (ray_llm_eks/components/pod_identity.py), the role's way to the
        pod."""
        super().__init__(self.TYPE, name, None, opts)
        cluster_name, region = args.cluster_name, args.region
        partition = botocore_facts.load().region_partition(region)
        self.role = pod_identity_role(f"{name}-role", self, cluster_name, (NAMESPACE, SERVICE_ACCOUNT))
        # The controller's own published policy, scoped to this cluster (domain/security/load_balancer_policy.py).
        policy = aws.iam.RolePolicy(
            f"{name}-policy",
            role=self.role.name,
            policy=json.dumps(load_balancer_policy.controller_policy(partition, cluster_name)),
            # The inline policy it replaces, updated in place: the controller is never without its rights.
            opts=pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(name=f"{name}-security-groups")]),
        )
        self.release = release_with_role(
            name,
            ControllerRelease(
                "aws-load-balancer-controller",
                ChartPin(*LB_CONTROLLER_CHART, args.chart_version),
                controller_values(cluster_name, region, args.vpc_id),
                (NAMESPACE, SERVICE_ACCOUNT),
            ),
            cluster_name,
            self.role,
            [policy],
            agent,
            self,
        )
        self.register_outputs({"roleArn": self.role.arn})


ARGS = "InternalEndpointArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())


@dataclass(frozen=True)
class InternalEndpointArgs:
    """The internal NLB Service in front of a RayService's serve port, and who may reach it."""

    source_ranges: Sequence[str]
    """The CIDR blocks that may reach the load balancer, never 0.0.0.0/0 (config key endpointSourceRanges)."""
    namespace: str | None = default("namespace")
    """The RayService's namespace, where the Service goes (config key namespace)."""
    service_name: str | None = default("serviceName")
    """The RayService's name: the Service is <service_name>-internal-endpoint (config key serviceName)."""
    subnets: Sequence[str] | None = ()
    """The Name tags of the subnets the NLB goes in: subnets where no pod lives (the stack's public ones,
    ray_llm_eks/domain/platform/subnets.py), so a NetworkPolicy can tell the NLB's addresses from pods'; none: the
    controller's."""
    pod_subnets: Sequence[str] | None = ()
    """The CIDRs of the subnets where pods get addresses (VPC CNI): a source range overlapping one is refused,
    since it would let pods of every namespace reach the serve port through the NLB; none: not checked."""
    certificate_arn: str | None = None
    """An ACM certificate of the cluster's region for a TLS listener on 443 (config key endpointCertificateArn); none:
    plain TCP on the serve port."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        pods = tuple(self.pod_subnets)
        for block in pods:
            check_cidr("pod_subnets", block, ARGS)
        ranges = check_endpoint_source_ranges("source_ranges", self.source_ranges, ARGS, pod_subnets=pods)
        object.__setattr__(self, "source_ranges", ranges)
        check_namespace("namespace", self.namespace, ARGS)
        check_service_name("service_name", self.service_name, ARGS)
        if self.certificate_arn is not None:
            check_certificate_arn("certificate_arn", self.certificate_arn, file=ARGS)


TLS_PORT = 443
# TLS 1.2 and 1.3 only; the controller's default, ELBSecurityPolicy-2016-08, still takes TLS 1.0 (v3.5.0
# docs/guide/service/annotations.md, ssl-negotiation-policy).
TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"


def listener(args: InternalEndpointArgs) -> tuple[dict, dict]:
    """The Service's one port and the annotations it needs: TLS on 443 with the certificate, else plain TCP on
    the serve port. Either way to the pods' serve port."""
    if args.certificate_arn is None:
        return {"name": "serve", "port": SERVE_PORT, "targetPort": SERVE_PORT, "protocol": "TCP"}, {}
    tls = {
        f"{ANNOTATION}-ssl-cert": args.certificate_arn,
        f"{ANNOTATION}-ssl-ports": "https",
        f"{ANNOTATION}-ssl-negotiation-policy": TLS_POLICY,
    }
    return {"name": "https", "port": TLS_PORT, "targetPort": SERVE_PORT, "protocol": "TCP"}, tls


def internal_nlb_service(args: InternalEndpointArgs) -> dict:
    """The Service manifest: internal NLB in the given subnets, IP targets (the pods' VPC addresses),
    source ranges, no node port."""
    port, tls = listener(args)
    return {
        "metadata": {
            "name": f"{args.service_name}-internal-endpoint",
            "namespace": args.namespace,
            "annotations": {
                "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
                "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
                # In the public subnets, where no pod lives, so a NetworkPolicy can tell the NLB's
                # addresses from pods' (ray_llm_eks/domain/security/network_policies.py); internal: private addresses
                # only.
                **({SUBNETS: ",".join(args.subnets)} if args.subnets else {}),
                # Off is AWS's default for IP targets over TCP; said here so the pods see the NLB's
                # address, never the client's (which may be a pod's), whatever that default becomes.
                f"{ANNOTATION}-target-group-attributes": "preserve_client_ip.enabled=false",
                **tls,
            },
        },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "service.k8s.aws/nlb",  # handled by the controller, not the in-tree one
            # No NodePort: IP targets reach the pods directly, and a node port would be a way in that no
            # NetworkPolicy closes (the VPC CNI's agent admits the node's own address, and kube-proxy forwards
            # from it). Instance targets would need one (the controller's docs, annotations.md nlb-target-type).
            "allocateLoadBalancerNodePorts": False,
            "loadBalancerSourceRanges": list(args.source_ranges),
            "selector": SERVE_POD_SELECTOR,
            "ports": [port],
        },
    }


class InternalEndpoint(pulumi.ComponentResource):
    """The NLB Service; `url` is its OpenAI base URL once AWS has named the load balancer."""

    TYPE = "ray-llm-eks:load_balancer:InternalEndpoint"  # the shipped program's resources keep their URNs

    url: pulumi.Output[str]
    """The OpenAI base URL of the load balancer (http://, or https:// with a certificate), once AWS names it."""

    def __init__(self, name: str, args: InternalEndpointArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        manifest = internal_nlb_service(args)
        # AWS may refuse to take subnets off a running NLB (the controller's docs, annotation
        # aws-load-balancer-subnets): a changed annotation replaces the Service, and so the NLB.
        self.service = k8s.core.v1.Service(
            name,
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self, replace_on_changes=[f'metadata.annotations["{SUBNETS}"]'], delete_before_replace=True
            ),
        )
        tls = args.certificate_arn is not None
        self.url = self.service.status.apply(lambda status: _base_url(status, tls))
        self.register_outputs({"url": self.url})


def _base_url(status, tls: bool) -> str | None:
    ingress = (status.load_balancer.ingress or []) if status and status.load_balancer else []
    if not ingress:
        return None
    host = ingress[0].hostname or ingress[0].ip
    # With TLS a client names the host the certificate holds (a record of the user's pointing at this one).
    return f"https://{host}/v1" if tls else f"http://{host}:{SERVE_PORT}/v1"
