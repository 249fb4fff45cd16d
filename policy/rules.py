"""The stack's guardrails as plain functions over resources (standard library, PyYAML and
ray_llm_eks/domain/core/facts.py).

The same functions run in two places: `pulumi preview --policy-pack policy` (policy/__main__.py wraps
them in pulumi-policy's classes) and `make policy STACK=<stack>` (offline/policy_check.py feeds them
the offline plan's recorded resources). A resource is what the program registers: type token, name,
URN, inputs in Pulumi's camelCase, and the URNs it depends on. pulumi-eks's components appear with
their own inputs offline (their children are invisible under mocks); under the CLI the rules also
read the AWS resources those components create (cluster, launch template, VPC CNI add-on).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml  # a dependency of the pulumi SDK itself: in the program's venv and the pack's

# The program's own names, ports and markers, and how wide public ranges may be: standard library only,
# importable in the pack's venv (policy/__main__.py puts the repository root on sys.path).
from ray_llm_eks.domain.core import address_ranges
from ray_llm_eks.domain.core.facts import (
    DASHBOARD_PORT,
    DEV_ENVIRONMENTS,
    EFA_RESOURCE,
    ENVIRONMENT_ANNOTATION,
    ENVIRONMENT_TAG,
    EXACT_CHART_VERSION,
    HEAD_METRICS_PORTS,
    IMAGE_DIGEST,
    IMAGE_DIGEST_PLACEHOLDER,
    INSTANCE_METADATA_CIDR,
    KEY_CHECKED_INGRESS,
    KUBERAY_NAMESPACE,
    NODE_METADATA_OPTIONS,
    OPERATOR_NAMESPACE_ANNOTATION,
    PD_ROLES,
    POD_MONITOR_TYPE,
    POOL_NODE_LABEL,
    POOL_RESOURCE_PREFIX,
    PROMETHEUS_NAMESPACE_ANNOTATION,
    SECRET_MARKER,
    SERVE_PORT,
)

EKS_CLUSTER = "eks:index:Cluster"
MANAGED_NODE_GROUP = "eks:index:ManagedNodeGroup"
AWS_EKS_CLUSTER = "aws:eks/cluster:Cluster"
AWS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_ADDON = "aws:eks/addon:Addon"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
K8S_SERVICE = "kubernetes:core/v1:Service"
K8S_SECRET = "kubernetes:core/v1:Secret"
K8S_NAMESPACE = "kubernetes:core/v1:Namespace"
KARPENTER_NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
KARPENTER_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
# Karpenter v1.14 EC2NodeClass networkInterfaces[].interfaceType: interface | efa-only (an EFA device).
EFA_INTERFACE_TYPES = {"efa", "efa-only"}
ZONE_REQUIREMENT = "topology.kubernetes.io/zone"  # the well-known label a NodePool requirement names
# A NodePool's nodeClassRef group under EKS Auto Mode: its NodeClass documents no network interfaces and no
# placement group selector (EKS user guide create-node-class), so it cannot carry a PD pool.
AUTO_MODE_NODE_CLASS_GROUP = "eks.amazonaws.com"
# Kubernetes' PodSecurity admission labels and levels (ray_llm_eks/domain/security/pod_security.py sets them).
POD_SECURITY = "pod-security.kubernetes.io"
POD_SECURITY_LEVELS = ("privileged", "baseline", "restricted")
POD_SUBNET_TAG = "kubernetes.io/role/internal-elb"  # our private subnets, where the nodes and so the pods live
# Kubernetes kinds whose spec.template is a pod template (type token -> path to the pod spec).
WORKLOADS = {
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:core/v1:Pod": ("spec",),
}


@dataclass(frozen=True)
class Resource:
    """One registered resource, as both the offline plan and CrossGuard can describe it."""

    type: str
    name: str
    urn: str
    props: Mapping[str, Any]
    dependencies: tuple[str, ...] = ()


@dataclass(frozen=True)
class Violation:
    policy: str
    resource: Resource | None
    message: str
    advisory: bool = False  # reported, never blocking

    def __str__(self) -> str:
        where = f"{self.resource.type} {self.resource.name}: " if self.resource else ""
        return f"policy {self.policy} ({'advisory' if self.advisory else 'mandatory'}): {where}{self.message}"


@dataclass(frozen=True)
class Policy:
    """One rule, mandatory unless `advisory` (then CrossGuard and `make policy` report it and go on).
    `per_resource` rules see one resource at a time (CrossGuard runs them before each resource is
    created); the others need the whole stack."""

    name: str
    description: str
    per_resource: Callable[[Resource], list[str]] | None = None
    whole_stack: Callable[[list[Resource]], list[tuple[Resource | None, str]]] | None = None
    tags: tuple[str, ...] = field(default=())
    advisory: bool = False

    def check(self, resources: Iterable[Resource]) -> list[Violation]:
        resources = list(resources)
        found = []
        if self.per_resource is not None:
            for resource in resources:
                found += [Violation(self.name, resource, m, self.advisory) for m in self.per_resource(resource)]
        if self.whole_stack is not None:
            found += [Violation(self.name, r, m, self.advisory) for r, m in self.whole_stack(resources)]
        return found


# ---------------------------------------------------------------------------------------------
# Helpers


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def pod_specs(resource: Resource) -> list[tuple[str, Mapping]]:
    """Every pod spec a Kubernetes object declares, with a label saying where it is."""
    if resource.type in WORKLOADS:
        spec = _get(resource.props, *WORKLOADS[resource.type])
        return [("pod", spec)] if isinstance(spec, Mapping) else []
    if resource.type == RAY_SERVICE:
        cluster = _get(resource.props, "spec", "rayClusterConfig") or {}
        found = [("head group", _get(cluster, "headGroupSpec", "template", "spec"))]
        for group in cluster.get("workerGroupSpecs") or []:
            found.append((f"worker group {group.get('groupName')}", _get(group, "template", "spec")))
        return [(label, spec) for label, spec in found if isinstance(spec, Mapping)]
    return []


def _containers(spec: Mapping) -> list[Mapping]:
    return [c for key in ("initContainers", "containers") for c in spec.get(key) or [] if isinstance(c, Mapping)]


def _pod_requests_efa(spec: Mapping) -> bool:
    return any(EFA_RESOURCE in (_get(c, "resources", "limits") or {}) for c in spec.get("containers") or [])


# ---------------------------------------------------------------------------------------------
# Nodes


def _imdsv2(r: Resource) -> list[str]:
    """A node group's launch template (pulumi-eks's, which it builds under enableIMDSv2; offline, its
    modelled metadata options) asks for session tokens and a hop limit of 1: no pod reaches the node role."""
    if r.type == MANAGED_NODE_GROUP and not _true(r.props.get("enableIMDSv2")):
        return ["enableIMDSv2 must be true (instance metadata only with session tokens)"]
    if r.type == KARPENTER_NODE_CLASS:  # Karpenter's launch templates, from the node class's spec
        r = Resource(r.type, r.name, r.urn, _get(r.props, "spec") or {}, r.dependencies)
    elif r.type != AWS_LAUNCH_TEMPLATE:
        return []
    found = []
    if _get(r.props, "metadataOptions", "httpTokens") != "required":
        found.append("metadataOptions.httpTokens must be 'required' (IMDSv2)")
    hops = _get(r.props, "metadataOptions", "httpPutResponseHopLimit")
    if hops != NODE_METADATA_OPTIONS["httpPutResponseHopLimit"]:
        found.append(
            f"metadataOptions.httpPutResponseHopLimit is {hops}, must be 1 (a pod is one hop further than its node)"
        )
    return found


def _private_nodes(r: Resource) -> list[str]:
    if r.type == EKS_CLUSTER and r.props.get("nodeAssociatePublicIpAddress") is not False:
        return ["nodeAssociatePublicIpAddress must be false (nodes live in private subnets)"]
    if r.type == AWS_SUBNET and _true(r.props.get("mapPublicIpOnLaunch")):
        return ["mapPublicIpOnLaunch must be false (no instance gets a public IP on launch)"]
    interfaces = (r.props.get("networkInterfaces") or []) if r.type == AWS_LAUNCH_TEMPLATE else []
    if any(_true(n.get("associatePublicIpAddress")) for n in interfaces):
        return ["a network interface asks for a public IP address"]
    return []


def _serve_roles(resources: list[Resource]) -> dict[str, str]:
    """Pool name -> the serve role its Ray workers run, from the RayService's worker groups (their
    nodeSelector on the pool label and the `pool_<serve role>` Ray resource they advertise)."""
    roles = {}
    for r in resources:
        groups = _get(r.props, "spec", "rayClusterConfig", "workerGroupSpecs") if r.type == RAY_SERVICE else None
        for group in groups or []:
            pool = _get(group, "template", "spec", "nodeSelector", POOL_NODE_LABEL)
            served = [
                k.removeprefix(POOL_RESOURCE_PREFIX)
                for k in group.get("resources") or {}
                if k.startswith(POOL_RESOURCE_PREFIX)
            ]
            if pool and served:
                roles[pool] = served[0]
    return roles


def _gpu_pools_efa_one_zone(resources: list[Resource]) -> list[tuple[Resource | None, str]]:
    """PD pools only: EFA carries the KV cache from prefill to decode, and the collocated baseline moves
    none between nodes. A pool is a PD pool when it serves prefill or decode, whatever it is named."""
    found: list[tuple[Resource | None, str]] = []
    subnets: dict[str, Any] = {}
    serves = _serve_roles(resources)
    for r in resources:
        pool = _get(r.props, "labels", POOL_NODE_LABEL)
        if r.type not in (MANAGED_NODE_GROUP, AWS_NODE_GROUP) or serves.get(pool, pool) not in PD_ROLES:
            continue
        role = pool
        subnet_ids = r.props.get("subnetIds") or []
        if len(subnet_ids) != 1:
            found.append(
                (r, f"PD pool {role} must use exactly one subnet (EFA cannot leave it), has {len(subnet_ids)}")
            )
        else:
            subnets[role] = subnet_ids[0]
        if r.type == MANAGED_NODE_GROUP:
            if not _true(r.props.get("enableEfaSupport")):
                found.append((r, f"PD pool {role} must set enableEfaSupport (NIXL moves the KV cache over EFA)"))
            if not r.props.get("placementGroupAvailabilityZone"):
                found.append((r, f"PD pool {role} must set placementGroupAvailabilityZone (one zone)"))
    found += _karpenter_pd_pools(resources, serves, subnets)
    if len(set(map(str, subnets.values()))) > 1:
        found.append((None, f"PD pools must share one subnet in one zone, found {dict(sorted(subnets.items()))}"))
    return found


def _karpenter_pd_pools(
    resources: list[Resource], serves: dict[str, str], subnets: dict[str, Any]
) -> list[tuple[Resource | None, str]]:
    """The same for the GPU pools Karpenter makes: a PD pool's EC2NodeClass gives its nodes an EFA interface
    and a placement group and selects one subnet; its NodePool allows one zone (`subnets` gets the pools'
    subnet selector and zone, so pools of both kinds are compared)."""
    found: list[tuple[Resource | None, str]] = []
    zones = {}
    for r in resources:
        if r.type != KARPENTER_NODE_POOL:
            continue
        template = _get(r.props, "spec", "template") or {}
        pool = _get(template, "metadata", "labels", POOL_NODE_LABEL)
        if serves.get(pool, pool) not in PD_ROLES:
            continue
        if _get(template, "spec", "nodeClassRef", "group") == AUTO_MODE_NODE_CLASS_GROUP:
            found.append((r, f"PD pool {pool} must not run on an EKS Auto Mode NodeClass (no EFA, no placement group)"))
        allowed = [
            req.get("values") or []
            for req in _get(template, "spec", "requirements") or []
            if req.get("key") == ZONE_REQUIREMENT and req.get("operator") == "In"
        ]
        if len(allowed) != 1 or len(allowed[0]) != 1:
            found.append((r, f"PD pool {pool} must allow exactly one zone ({ZONE_REQUIREMENT} In [one zone])"))
        else:
            zones[pool] = allowed[0][0]
        node_class = _get(template, "spec", "nodeClassRef", "name")
        for c in resources:
            if c.type != KARPENTER_NODE_CLASS or _get(c.props, "metadata", "name") != node_class:
                continue
            spec, must = _get(c.props, "spec") or {}, f"PD pool {pool}'s node class must"
            kinds = {n.get("interfaceType") for n in spec.get("networkInterfaces") or []}
            if not kinds & EFA_INTERFACE_TYPES:
                found.append((c, f"{must} give its nodes an EFA interface (networkInterfaces)"))
            if not spec.get("placementGroupSelector"):
                found.append((c, f"{must} set placementGroupSelector (a cluster placement group)"))
            terms = spec.get("subnetSelectorTerms") or []
            if len(terms) != 1:
                found.append((c, f"{must} select exactly one subnet, has {len(terms)} terms"))
            else:
                subnets[pool] = json.dumps(terms[0], sort_keys=True)
    if len(set(zones.values())) > 1:
        found.append((None, f"PD pools must share one zone, found {dict(sorted(zones.items()))}"))
    return found


# ---------------------------------------------------------------------------------------------
# Control plane


def _open_cidr(cidrs: Any) -> list[str]:
    opened = []
    for cidr in cidrs or []:
        try:
            if ipaddress.ip_network(str(cidr), strict=False).prefixlen == 0:
                opened.append(str(cidr))
        except ValueError:
            continue
    return opened


def _api_endpoint(r: Resource) -> list[str]:
    if r.type == EKS_CLUSTER:
        cidrs, public = r.props.get("publicAccessCidrs"), r.props.get("endpointPublicAccess")
        tags = r.props.get("clusterTags")
    elif r.type == AWS_EKS_CLUSTER:
        vpc = r.props.get("vpcConfig") or {}
        cidrs, public, tags = vpc.get("publicAccessCidrs"), vpc.get("endpointPublicAccess"), r.props.get("tags")
    else:
        return []
    environment = _get(tags, ENVIRONMENT_TAG)
    if public is False or environment in DEV_ENVIRONMENTS:
        return []
    if cidrs is None:
        return [
            f"the public API endpoint needs publicAccessCidrs outside {list(DEV_ENVIRONMENTS)} (EKS opens it to all)"
        ]
    if address_ranges.too_wide(cidrs):
        return [
            f"the public API endpoint is open to {list(cidrs)} ({address_ranges.reach(cidrs):,} addresses, more than "
            f"one /8) in environment {environment!r}: list your networks"
        ]
    return []


def _vpc_cni_network_policy(r: Resource) -> list[str]:
    if r.type == EKS_CLUSTER and not _true(_get(r.props, "vpcCniOptions", "enableNetworkPolicy")):
        return ["vpcCniOptions.enableNetworkPolicy must be true (else NetworkPolicies are not enforced)"]
    if r.type == AWS_ADDON and r.props.get("addonName") == "vpc-cni":
        try:
            values = json.loads(r.props.get("configurationValues") or "{}")
        except (TypeError, ValueError):
            values = {}
        if not _true(values.get("enableNetworkPolicy")):
            return ['the vpc-cni add-on needs configurationValues {"enableNetworkPolicy": "true"}']
    return []


# ---------------------------------------------------------------------------------------------
# Pods


def _privileged_only_efa_workers(r: Resource) -> list[str]:
    found = []
    for where, spec in pod_specs(r):
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if _true(spec.get(key)):
                found.append(f"{where}: {key} must not be set")
        efa = r.type == RAY_SERVICE and where.startswith("worker group") and _pod_requests_efa(spec)
        for container in _containers(spec):
            security = container.get("securityContext") or {}
            if _true(security.get("privileged")) and not efa:
                found.append(
                    f"{where}: container {container.get('name')} is privileged; only Ray workers that request "
                    f"{EFA_RESOURCE} may be (NIXL registers GPU memory with the EFA device)"
                )
    if r.type == HELM_RELEASE and _any_true(r.props.get("values"), ("hostNetwork", "privileged")):
        found.append("chart values ask for hostNetwork or privileged containers")
    return found


def _any_true(value: Any, keys: tuple[str, ...]) -> bool:
    """Whether any of `keys` is true anywhere in nested values (mappings and lists of any kind:
    CrossGuard hands read-only proxies, not dicts)."""
    if isinstance(value, Mapping):
        return any((k in keys and _true(v)) or _any_true(v, keys) for k, v in value.items())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return any(_any_true(v, keys) for v in value)
    return False


_TAGGED = re.compile(r"^[^@\s:]+:[\w][\w.-]{0,127}$")
# A digest, or offline the marked placeholder the program puts where `pulumi up` puts the digest.
_BY_DIGEST = re.compile(rf"({IMAGE_DIGEST}|@{re.escape(IMAGE_DIGEST_PLACEHOLDER)})$")
_EXACT_VERSION = re.compile(rf"^{EXACT_CHART_VERSION}$")


def _by_digest(image: str) -> bool:
    return _BY_DIGEST.search(image) is not None


def _image_pinned(image: str) -> bool:
    """An exact tag, a digest, or both (`name:tag@sha256:...`, the tag for people); never :latest alone."""
    name = _BY_DIGEST.sub("", image)
    if "@" in name or any(c.isspace() for c in name):
        return False
    return name != image or (bool(_TAGGED.match(name.rsplit("/", 1)[-1])) and not name.endswith(":latest"))


def _images_by_digest(r: Resource) -> list[str]:
    """Outside dev, every container of the RayService runs an image pinned by digest (a tag can be
    pushed again; a digest names one image), offline its marked placeholder."""
    if r.type != RAY_SERVICE:
        return []
    environment = _get(r.props, "metadata", "annotations", ENVIRONMENT_ANNOTATION)
    if environment in DEV_ENVIRONMENTS:
        return []
    return [
        f"{where}: container {c.get('name')} image {c.get('image')!r} is not pinned by digest "
        f"(environment {environment!r}; only {list(DEV_ENVIRONMENTS)} may run a tag)"
        for where, spec in pod_specs(r)
        for c in _containers(spec)
        if not (isinstance(c.get("image"), str) and _by_digest(c["image"]))
    ]


def _pinned(r: Resource) -> list[str]:
    found = []
    if r.type == HELM_RELEASE:
        version = r.props.get("version")
        if not isinstance(version, str) or not _EXACT_VERSION.match(version):
            found.append(f"chart {r.props.get('chart')} must be pinned to an exact version, has {version!r}")
        tag = _get(r.props.get("values"), "image", "tag")
        if tag in ("latest", ""):
            found.append(f"chart values pin image.tag to {tag!r}")
    for where, spec in pod_specs(r):
        for container in _containers(spec):
            image = container.get("image")
            if not isinstance(image, str) or not _image_pinned(image):
                found.append(f"{where}: container {container.get('name')} image {image!r} needs an exact tag or digest")
    return found


# ---------------------------------------------------------------------------------------------
# Network exposure


def _load_balancer_source_ranges(r: Resource) -> list[str]:
    if r.type != K8S_SERVICE or _get(r.props, "spec", "type") != "LoadBalancer":
        return []
    ranges = _get(r.props, "spec", "loadBalancerSourceRanges")
    if not ranges:
        return ["a Service of type LoadBalancer needs spec.loadBalancerSourceRanges"]
    opened = _open_cidr(ranges)
    return [f"loadBalancerSourceRanges open to {opened}"] if opened else []


def _rule_ports(rule: Mapping) -> set:
    return {p.get("port") for p in rule.get("ports") or [] if isinstance(p, Mapping)}


def _operator_only(sources: Sequence, operator_namespace: str) -> bool:
    """Every source is the KubeRay operator's (or Prometheus's) namespace, selected by name (a pod selector beside
    it only narrows it to some of that namespace's pods)."""
    for source in sources:
        selector = source.get("namespaceSelector") if set(source) - {"podSelector"} == {"namespaceSelector"} else None
        expressions = (selector or {}).get("matchExpressions") or []
        if set(selector or {}) != {"matchExpressions"} or len(expressions) != 1:
            return False
        (expression,) = expressions
        named = expression.get("key") == "kubernetes.io/metadata.name" and expression.get("operator") == "In"
        if not named or list(expression.get("values") or []) != [operator_namespace]:
            return False
    return bool(sources)


def _admits_instance_metadata(peer: Mapping) -> bool:
    """An egress peer that reaches 169.254.169.254: an IP block holding it and not excepting it. Pod and
    namespace selectors name pods, never the node's link-local metadata address."""
    block = peer.get("ipBlock")
    if not isinstance(block, Mapping):
        return False
    metadata = ipaddress.ip_network(INSTANCE_METADATA_CIDR)
    try:
        cidr = ipaddress.ip_network(str(block.get("cidr")), strict=False)
        excepted = [ipaddress.ip_network(str(e), strict=False) for e in block.get("except") or []]
    except ValueError:
        return True  # unreadable: not shown to exclude it
    if cidr.version != metadata.version or not metadata.subnet_of(cidr):
        return False
    return not any(e.version == metadata.version and metadata.subnet_of(e) for e in excepted)


def _ray_egress_policies(resources: list[Resource]) -> list[tuple[Resource | None, str]]:
    """In each RayService's namespace: a NetworkPolicy puts every pod's egress under policy, and none of
    the namespace's policies admits egress to the instance metadata (policies add up: one rule open to
    it opens it to the pods that policy selects)."""
    found: list[tuple[Resource | None, str]] = []
    policies = [r for r in resources if r.type == NETWORK_POLICY]
    for service in (r for r in resources if r.type == RAY_SERVICE):
        namespace = _get(service.props, "metadata", "namespace")
        mine = [p for p in policies if _get(p.props, "metadata", "namespace") == namespace]
        if not any(
            _get(p.props, "spec", "podSelector") == {} and "Egress" in (_get(p.props, "spec", "policyTypes") or [])
            for p in mine
        ):
            found.append((service, f"namespace {namespace} has no NetworkPolicy governing every pod's egress"))
        for policy in mine:
            for rule in _get(policy.props, "spec", "egress") or []:
                peers = rule.get("to") or []
                if not peers or any(_admits_instance_metadata(p) for p in peers if isinstance(p, Mapping)):
                    found.append(
                        (policy, f"admits egress to the instance metadata ({INSTANCE_METADATA_CIDR}): except it")
                    )
    return found


def _ray_network_policies(resources: list[Resource]) -> list[tuple[Resource | None, str]]:
    """In each RayService's namespace: ingress denied by default, and whatever is allowed from
    outside the namespace (other namespaces, IP blocks, or any source) is the serve port only, or
    the dashboard port for the KubeRay operator's namespace alone (it manages Serve through it)."""
    found: list[tuple[Resource | None, str]] = []
    policies = [r for r in resources if r.type == NETWORK_POLICY]
    for service in (r for r in resources if r.type == RAY_SERVICE):
        namespace = _get(service.props, "metadata", "namespace")
        mine = [p for p in policies if _get(p.props, "metadata", "namespace") == namespace]
        default_deny = any(
            _get(p.props, "spec", "podSelector") == {}
            and "Ingress" in (_get(p.props, "spec", "policyTypes") or [])
            and not _get(p.props, "spec", "ingress")
            for p in mine
        )
        if not default_deny:
            found.append((service, f"namespace {namespace} has no default-deny ingress NetworkPolicy"))
        for policy in mine:
            annotations = _get(policy.props, "metadata", "annotations") or {}
            operator_namespace = annotations.get(OPERATOR_NAMESPACE_ANNOTATION, KUBERAY_NAMESPACE)
            prometheus_namespace = annotations.get(PROMETHEUS_NAMESPACE_ANNOTATION)
            for rule in _get(policy.props, "spec", "ingress") or []:
                sources = rule.get("from") or []
                outside = not sources or any("namespaceSelector" in s or "ipBlock" in s for s in sources)
                ports = _rule_ports(rule)
                if (
                    outside
                    and ports
                    and ports <= {DASHBOARD_PORT, "dashboard"}
                    and _operator_only(sources, operator_namespace)
                ):
                    continue
                if (
                    outside
                    and ports
                    and ports <= set(HEAD_METRICS_PORTS.values())
                    and prometheus_namespace
                    and _operator_only(sources, prometheus_namespace)
                ):
                    continue
                if outside and (not ports or ports - {SERVE_PORT, "serve"}):
                    found.append(
                        (
                            policy,
                            f"allows ingress from outside namespace {namespace} to ports "
                            f"{sorted(map(str, ports)) or 'all'}; only the serve port {SERVE_PORT} may be",
                        )
                    )
    return found


def _pod_security_labels(r: Resource) -> list[str]:
    """A namespace the stack creates says its Pod Security level: enforce, warn and audit."""
    if r.type != K8S_NAMESPACE:
        return []
    labels = _get(r.props, "metadata", "labels") or {}
    wrong = [m for m in ("enforce", "warn", "audit") if labels.get(f"{POD_SECURITY}/{m}") not in POD_SECURITY_LEVELS]
    return [f"label {POD_SECURITY}/{m} must be one of {', '.join(POD_SECURITY_LEVELS)}" for m in wrong]


def _ip_blocks_outside_pod_subnets(resources: list[Resource]) -> list[tuple[Resource | None, str]]:
    """With the VPC CNI every pod has an address in a private subnet: an IP block that overlaps one
    admits pods of every namespace, past the namespace selectors, whether a NetworkPolicy admits it or
    a load balancer's source ranges do (the AWS Load Balancer Controller makes them the NLB's security
    group rules, and the pods admit the NLB)."""
    pod_subnets = []
    for subnet in (r for r in resources if r.type == AWS_SUBNET):
        cidr = subnet.props.get("cidrBlock")
        if POD_SUBNET_TAG in (subnet.props.get("tags") or {}) and isinstance(cidr, str):
            pod_subnets.append(ipaddress.ip_network(cidr, strict=False))
    blocks: list[tuple[Resource, str, object]] = []  # (resource, what admits, the CIDR)
    for policy in (r for r in resources if r.type == NETWORK_POLICY):
        for rule in _get(policy.props, "spec", "ingress") or []:
            blocks += [(policy, "ipBlock", (s.get("ipBlock") or {}).get("cidr")) for s in rule.get("from") or []]
    for service in (r for r in resources if r.type == K8S_SERVICE and _get(r.props, "spec", "type") == "LoadBalancer"):
        blocks += [
            (service, "loadBalancerSourceRanges", c)
            for c in _get(service.props, "spec", "loadBalancerSourceRanges") or []
        ]
    found: list[tuple[Resource | None, str]] = []
    for resource, where, cidr in blocks:
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            continue  # none, or not a CIDR: the API server refuses it
        hit = [str(n) for n in pod_subnets if network.overlaps(n)]
        if hit:
            found.append((resource, f"{where} {cidr} holds pod addresses (subnets {', '.join(hit)})"))
    return found


def _ray_token_auth(r: Resource) -> list[str]:
    """The RayService's Ray cluster requires Ray's token (KubeRay authOptions mode token): without it anyone who
    reaches the dashboard submits jobs on the GPU workers or redeploys the application without its key check."""
    if r.type != RAY_SERVICE:
        return []
    options = _get(r.props, "spec", "rayClusterConfig", "authOptions") or {}
    if options.get("mode") != "token":
        return ["spec.rayClusterConfig.authOptions.mode is not token: the Ray dashboard and GCS answer anyone"]
    return []


def _endpoint_requires_api_key(r: Resource) -> list[str]:
    """Every Serve application of the RayService answers through the key-checking ingress, unless the
    RayService says it runs in a dev environment (where a stack may turn the check off)."""
    if r.type != RAY_SERVICE:
        return []
    environment = _get(r.props, "metadata", "annotations", ENVIRONMENT_ANNOTATION)
    if environment in DEV_ENVIRONMENTS:
        return []
    try:
        document = yaml.safe_load(_get(r.props, "spec", "serveConfigV2") or "") or {}
    except yaml.YAMLError:
        return ["spec.serveConfigV2 is not YAML"]
    return [
        f"application {app.get('name')} does not use the API key ingress ({KEY_CHECKED_INGRESS}) "
        f"in environment {environment!r} (only {list(DEV_ENVIRONMENTS)} may turn it off)"
        for app in document.get("applications") or []
        if _get(app, "args", "ingress_cls_config", "ingress_cls") != KEY_CHECKED_INGRESS
    ]


# ---------------------------------------------------------------------------------------------
# Secrets

_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_?KEY|ACCESS_KEY)", re.IGNORECASE)
# A variable that names where a secret lies (HF_TOKEN_PATH, Hugging Face's client's): a literal path is fine when
# it is inside a volume the container mounts from a Secret.
_SECRET_LOCATION = re.compile(r"_(PATH|FILE)$", re.IGNORECASE)


def _in_secret_volume(path: str, container: Mapping, spec: Mapping) -> bool:
    secret_volumes = {v.get("name") for v in spec.get("volumes") or [] if "secret" in v}
    return any(
        m.get("name") in secret_volumes and path.startswith(str(m.get("mountPath", "")).rstrip("/") + "/")
        for m in container.get("volumeMounts") or []
    )


def _no_plaintext_secrets(r: Resource, secrets_marked: bool) -> list[str]:
    """Secret values come from Pulumi secrets; pods read them through secretKeyRef, never a literal.
    `secrets_marked`: the caller can tell a secret value from a plain one (the offline plan can;
    CrossGuard hands the policy secrets already decrypted)."""
    found = []
    if r.type == K8S_SECRET and secrets_marked:
        for key in ("data", "stringData"):
            value = r.props.get(key)
            if isinstance(value, Mapping):
                plain = sorted(k for k, v in value.items() if v != SECRET_MARKER)
                if plain:
                    found.append(f"{key} {plain} not from a Pulumi secret (pulumi config set --secret)")
            elif value is not None and value != SECRET_MARKER:
                found.append(f"{key} is not a Pulumi secret")
    for where, spec in pod_specs(r):
        for container in _containers(spec):
            for env in container.get("env") or []:
                name = str(env.get("name"))
                if not _SECRET_NAME.search(name) or "value" not in env:
                    continue
                if _SECRET_LOCATION.search(name) and _in_secret_volume(str(env["value"]), container, spec):
                    continue
                found.append(
                    f"{where}: container {container.get('name')} sets {name} as a literal; use valueFrom.secretKeyRef, "
                    "or a path inside a volume mounted from a Secret"
                )
    return found


def _watched_outside_dev(resources: list[Resource]) -> list[tuple[Resource | None, str]]:
    """Outside dev, Prometheus scrapes the RayService: PodMonitors select its head and its workers
    (observability mode embedded, amp or external; `none` leaves an endpoint no one can see)."""
    environments = [_get(r.props, "clusterTags", ENVIRONMENT_TAG) for r in resources if r.type == EKS_CLUSTER]
    if not environments or any(e in DEV_ENVIRONMENTS for e in environments):
        return []  # dev, or an existing cluster whose environment the stack does not declare
    found: list[tuple[Resource | None, str]] = []
    for service in (r for r in resources if r.type == RAY_SERVICE):
        namespace = _get(service.props, "metadata", "namespace")
        watched = {
            _get(m.props, "spec", "selector", "matchLabels", "ray.io/node-type")
            for m in resources
            if m.type == POD_MONITOR_TYPE and _get(m.props, "metadata", "namespace") == namespace
        }
        missing = sorted({"head", "worker"} - watched)
        if missing:
            found.append(
                (
                    service,
                    f"no PodMonitor selects its {' and '.join(missing)} pods in namespace {namespace}: "
                    "set observability.mode to embedded, amp or external outside environment dev",
                )
            )
    return found


def policies(secrets_marked: bool = True) -> list[Policy]:
    """The pack, in the order `make policy` reports it."""
    return [
        Policy(
            "nodes-require-imdsv2",
            "Every node uses IMDSv2 (session tokens) with a hop limit of 1.",
            per_resource=_imdsv2,
        ),
        Policy("nodes-in-private-subnets", "No node or subnet hands out public IPs.", per_resource=_private_nodes),
        Policy(
            "gpu-pools-efa-one-zone",
            "Prefill/decode GPU pools use EFA and share one subnet in one zone.",
            whole_stack=_gpu_pools_efa_one_zone,
        ),
        Policy(
            "api-endpoint-restricted",
            "The public Kubernetes API endpoint is limited to listed CIDRs outside dev.",
            per_resource=_api_endpoint,
        ),
        Policy(
            "vpc-cni-network-policy",
            "The VPC CNI enforces NetworkPolicies.",
            per_resource=_vpc_cni_network_policy,
        ),
        Policy(
            "ray-network-policies",
            "Ray's namespace denies ingress by default; only the serve port is reachable from outside it.",
            whole_stack=_ray_network_policies,
        ),
        Policy(
            "ray-egress-except-instance-metadata",
            "Ray's namespace governs every pod's egress, and no policy there admits the instance metadata.",
            whole_stack=_ray_egress_policies,
        ),
        Policy(
            "ip-blocks-outside-pod-subnets",
            "No NetworkPolicy or load balancer admits an IP block that holds pods' addresses (the private subnets).",
            whole_stack=_ip_blocks_outside_pod_subnets,
        ),
        Policy(
            "namespaces-pod-security",
            "Every namespace the stack creates sets its Pod Security Admission levels.",
            per_resource=_pod_security_labels,
        ),
        Policy(
            "privileged-only-efa-workers",
            "Only EFA GPU workers run privileged; no pod uses the host's network, PID or IPC namespace.",
            per_resource=_privileged_only_efa_workers,
        ),
        Policy("charts-and-images-pinned", "Helm charts and images are pinned exactly.", per_resource=_pinned),
        Policy(
            "images-by-digest",
            "Outside dev, the RayService's images are pinned by digest.",
            per_resource=_images_by_digest,
        ),
        Policy(
            "load-balancer-source-ranges",
            "A Service of type LoadBalancer lists its allowed source ranges.",
            per_resource=_load_balancer_source_ranges,
        ),
        Policy(
            "ray-token-auth",
            "The Ray cluster requires Ray's own token (dashboard, job submission, Serve REST API, GCS).",
            per_resource=_ray_token_auth,
        ),
        Policy(
            "endpoint-requires-api-key",
            "Requests without a valid API key are refused by the serving ingress.",
            per_resource=_endpoint_requires_api_key,
        ),
        Policy(
            "observability-outside-dev",
            "Outside dev, Prometheus scrapes the RayService's head and workers (PodMonitors).",
            whole_stack=_watched_outside_dev,
            advisory=True,  # an operator may choose to run blind; they are told, not stopped
        ),
        Policy(
            "no-plaintext-secrets",
            "Secrets reach Kubernetes only as Pulumi secrets, pods only through secretKeyRef.",
            per_resource=lambda r: _no_plaintext_secrets(r, secrets_marked),
        ),
    ]


def check_all(resources: Iterable[Resource], secrets_marked: bool = True) -> list[Violation]:
    resources = list(resources)
    return [v for policy in policies(secrets_marked) for v in policy.check(resources)]
