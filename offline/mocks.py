"""Pulumi mocks that stand in for AWS and Kubernetes, and a monitor that records every registration.

What only AWS knows at deploy time (ids, ARNs, endpoints, kubeconfigs, SSM lookups) comes back as
ONE placeholder format, `<known after deploy: WHAT>`, never as an invented real value.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from pulumi import ResourceOptions, ResourceTransformArgs
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.proto import resource_pb2

from offline import eks_rules
from ray_llm_eks.adapters.stackfile import SECRET_TEXT

SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
SIG_KEY = "4dabf18193072939515e22adb298388d"


# Pulumi's URN rule (pulumi 3.272 runtime/resource.py create_urn): the type qualified by its parent's, the root
# stack's left out.
def urn_of(stack: str, project: str, parent: str | None, type_: str, name: str) -> str:
    """A resource's URN: its type qualified by its parent's (the root stack's own type left out)."""
    qualified = type_
    if parent:
        parent_type = parent.split("::")[2]
        if parent_type != "pulumi:pulumi:Stack":
            qualified = f"{parent_type}${type_}"
    return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"


def placeholder(what: str) -> str:
    """The one marker for a value AWS (or the cluster) only knows at deploy time."""
    return f"<known after deploy: {what}>"


def is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("<known after deploy: ")


def plain(value: Any) -> Any:
    """A registered property as plain JSON: secrets become `[secret]`, references their URN."""
    if isinstance(value, dict):
        sig = value.get(SIG_KEY)
        if sig == SECRET_SIG:
            return SECRET_TEXT
        if sig == RESOURCE_SIG:
            return value.get("urn")
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if value == UNKNOWN:
        return placeholder("unknown")
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf carries every number as a double
    return value


@dataclass
class Registration:
    """One RegisterResource request, as the engine would receive it."""

    urn: str
    type: str
    name: str
    id: str | None
    parent: str | None
    dependencies: list[str]
    provider: str | None
    custom: bool
    remote: bool
    inputs: dict
    options: dict = field(default_factory=dict)


def _id_for(type_: str, name: str) -> str:
    return placeholder(f"{type_}::{name}.id")


# Outputs of remote (multi-language) components, whose children are invisible under mocks.
def _eks_cluster_outputs(name: str) -> dict:
    kubeconfig = placeholder(f"eks:index:Cluster::{name}.kubeconfig")
    return {"kubeconfig": kubeconfig, "kubeconfigJson": kubeconfig}


NO_ANSWER_OFFLINE = {
    "aws:index/getAvailabilityZones:getAvailabilityZones",
    "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings",
    "aws:servicequotas/getServiceQuota:getServiceQuota",
    "aws:ec2/getInstanceType:getInstanceType",
    "aws:eks/getClusters:getClusters",
    "aws:index/getCallerIdentity:getCallerIdentity",
    "aws:s3/getBucket:getBucket",
    "aws:ebs/getEncryptionByDefault:getEncryptionByDefault",
    "aws:ecr/getAuthorizationToken:getAuthorizationToken",  # the serving image's digest stays a placeholder
}


class PlanMocks(pulumi_mocks.Mocks):
    """Answers for resources and invokes: inputs echoed, deploy-time values as placeholders."""

    def __init__(self) -> None:
        self.monitor: RecordingMonitor | None = None

    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        state = dict(args.inputs)
        if args.typ == "eks:index:Cluster":
            state.update(_eks_cluster_outputs(args.name))
            state["clusterSecurityGroupId"] = placeholder(f"{args.typ}::{args.name}.clusterSecurityGroupId")
            if (state.get("autoMode") or {}).get("enabled"):  # the node role pulumi-eks makes for Auto Mode
                state["autoModeNodeRoleName"] = placeholder(f"{args.typ}::{args.name}.autoModeNodeRoleName")
            state["eksCluster"] = self.monitor.stand_in_child(
                "aws:eks/cluster:Cluster",
                args.name,
                {"roleArn": placeholder(f"{args.typ}::{args.name}.eksCluster.roleArn (pulumi-eks's service role)")},
            )
        elif args.typ == "eks:index:ManagedNodeGroup":
            self.monitor.transforms[args.name] = args.transforms  # for its modelled launch template
            state["nodeGroup"] = self.monitor.stand_in_child(
                "aws:eks/nodeGroup:NodeGroup",
                args.name,
                {
                    "nodeGroupName": placeholder(f"eks:index:ManagedNodeGroup::{args.name}.nodeGroup.nodeGroupName"),
                    "resources": [
                        {"autoscalingGroups": [{"name": placeholder(f"{args.name} node group's Auto Scaling group")}]}
                    ],
                },
            )
        elif args.typ == "aws:amp/workspace:Workspace":  # AMP gives each workspace its endpoint
            state["prometheusEndpoint"] = placeholder(f"{args.typ}::{args.name}.prometheusEndpoint")
        elif args.typ == "aws:elasticache/replicationGroup:ReplicationGroup":
            state["primaryEndpointAddress"] = placeholder(f"{args.typ}::{args.name}.primaryEndpointAddress")
        elif args.typ == "random:index/randomPassword:RandomPassword":
            state["result"] = placeholder(f"{args.typ}::{args.name}.result (a secret)")
        elif args.typ == "kubernetes:core/v1:Service" and (state.get("spec") or {}).get("type") == "LoadBalancer":
            hostname = placeholder(f"{args.typ}::{args.name}.status.loadBalancer.ingress[0].hostname")
            state["status"] = {"loadBalancer": {"ingress": [{"hostname": hostname}]}}
        if not args.custom:
            return None, state
        for out in ("arn", "name"):  # AWS assigns these when the input leaves them out
            state.setdefault(out, placeholder(f"{args.typ}::{args.name}.{out}"))
        return _id_for(args.typ, args.name), state

    def call(self, args: pulumi_mocks.MockCallArgs):
        if args.token == "aws:eks/getAddonVersion:getAddonVersion":  # EKS's default for the minor
            what = f"default {args.args['addonName']} version for Kubernetes {args.args['kubernetesVersion']}"
            return {**args.args, "version": placeholder(what), "id": placeholder(args.token)}
        if args.token == "aws:ssm/getParameter:getParameter":
            return {**args.args, "value": placeholder(f"ssm parameter {args.args['name']}"), "type": "String"}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":  # whose account deploys: known at deploy
            return {**args.args, "accountId": placeholder("the deploying account's id"), "id": placeholder(args.token)}
        if args.token in NO_ANSWER_OFFLINE:
            # Preflight data sources: no answer offline (their checks report "deferred").
            return {**args.args, "id": placeholder(args.token)}
        raise NotImplementedError(
            f"the offline plan has no answer for the data source {args.token}: add one to offline/mocks.py"
        )


def _aliases(request, urn: str) -> dict[str, list[str]]:
    """The URNs the resource declares it was known by (`aliases=`), as the engine resolves an alias spec: what
    the spec leaves out is the resource's own (name, type, stack, project, parent). Only where there are some,
    so a plan without aliases reads as before."""
    stack, project = urn.split("::")[0].removeprefix("urn:pulumi:"), urn.split("::")[1]
    found = list(request.aliasURNs)
    for alias in request.aliases:
        if alias.urn:
            found.append(alias.urn)
            continue
        spec = alias.spec
        parent = None if spec.noParent else (spec.parentUrn or request.parent or None)
        type_, name = spec.type or request.type, spec.name or request.name
        found.append(urn_of(spec.stack or stack, spec.project or project, parent, type_, name))
    return {"aliases": sorted(set(found))} if found else {}


HOOK_KINDS = ("before_create", "after_create", "before_update", "after_update", "before_delete", "after_delete")


def _timeouts_and_hooks(request) -> dict:
    """A registration's custom timeouts and resource hooks (by name), only where it has any: what `destroy`
    waits for and how long (ray_llm_eks/domain/platform/teardown.py)."""
    found = {}
    timeouts = {k: v for k in ("create", "update", "delete") if (v := getattr(request.customTimeouts, k))}
    if timeouts:
        found["customTimeouts"] = timeouts
    hooks = {k: list(getattr(request.hooks, k)) for k in HOOK_KINDS if request.HasField("hooks")}
    if any(hooks.values()):
        found["hooks"] = {k: v for k, v in hooks.items() if v}
    return found


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """A mock monitor that keeps each raw registration (parent, dependencies, provider, options)
    and the stack outputs, so the whole graph can be rebuilt offline."""

    def __init__(self, mocks: PlanMocks):
        super().__init__(mocks)
        mocks.monitor = self
        self.registrations: list[Registration] = []
        self.stack_outputs: dict = {}
        self.transforms: dict[str, list] = {}  # a ManagedNodeGroup's own transforms, by name

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The engine's URN, not the mock monitor's: the SDK's mocks qualify a child's type by its parent's last
        type only and keep the root stack's, where the engine qualifies it by the parent's whole chain
        without the root stack (pulumi runtime/resource.py create_urn, the SDK's own rule for an alias's URN)."""
        from pulumi.runtime.settings import get_project, get_stack

        return urn_of(get_stack(), get_project(), parent or None, type_, name)

    def stand_in_child(self, type_: str, parent_name: str, state: dict) -> dict:
        """A resource reference to a child of a remote component (invisible under mocks), registered
        here so the SDK can resolve it."""
        urn = self.make_urn("", type_, f"{parent_name}-stand-in")
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, _id_for(type_, parent_name), state)
        return {SIG_KEY: RESOURCE_SIG, "urn": urn, "id": _id_for(type_, parent_name), "packageVersion": ""}

    def GetDeploymentInfo(self, request):
        # No resource references: passing eks.Cluster into ManagedNodeGroup otherwise fails under
        # mocks ("attached to a different loop"); the engine then sends URNs/ids instead.
        info = super().GetDeploymentInfo(request)
        features = [f for f in info.supportedFeatures if f != resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES]
        return resource_pb2.DeploymentInfo(supportedFeatures=features)

    def SupportsFeature(self, request):
        if request.id == "resourceReferences":
            return type("SupportsFeatureResponse", (object,), {"hasSupport": False})
        return super().SupportsFeature(request)

    def RegisterResource(self, request):
        if request.remote:  # component providers check their inputs in their own code: do the same
            eks_rules.check(request.type, request.name, plain(json_format.MessageToDict(request.object)))
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        # A provider reference is "<urn>::<id>"; a URN is urn:pulumi:<stack>::<project>::<type>::<name>.
        provider = "::".join(request.provider.split("::")[:4]) if request.provider else None
        self.registrations.append(
            Registration(
                urn=response.urn,
                type=request.type,
                name=request.name,
                id=response.id or None,
                parent=request.parent or None,
                dependencies=sorted(set(request.dependencies)),
                provider=provider,
                custom=bool(request.custom),
                remote=bool(request.remote),
                inputs=plain(json_format.MessageToDict(request.object)),
                options={
                    "deleteBeforeReplace": request.deleteBeforeReplace,
                    "replaceOnChanges": list(request.replaceOnChanges),
                    "ignoreChanges": list(request.ignoreChanges),
                    "protect": request.protect,
                    "additionalSecretOutputs": list(request.additionalSecretOutputs),
                    # Only where set: what `destroy` leaves in the cloud (ray_llm_eks/domain/platform/teardown.py).
                    **({"retainOnDelete": True} if request.retainOnDelete else {}),
                    **_aliases(request, response.urn),
                    **_timeouts_and_hooks(request),
                },
            )
        )
        if request.type == "eks:index:ManagedNodeGroup":
            self._model_launch_template(self.registrations[-1])
        return response

    def _model_launch_template(self, group: Registration) -> None:
        """The launch template pulumi-eks builds inside a node group (invisible under mocks), its
        metadata options as pulumi-eks writes them (offline/eks_rules.py) and then as the node group's
        transforms leave them, the engine's order; marked `modelled` in the plan."""
        props = eks_rules.managed_launch_template(group.inputs)
        if props is None:
            return
        type_, name = "aws:ec2/launchTemplate:LaunchTemplate", f"{group.name}-launchTemplate"
        for transform in self.transforms.pop(group.name, []):
            result = transform(ResourceTransformArgs(True, type_, name, props, ResourceOptions()))
            if inspect.isawaitable(result):
                raise NotImplementedError(f"{group.name}: the offline plan runs synchronous transforms only")
            props = dict(result.props) if result is not None else props
        self.registrations.append(
            Registration(
                urn=self.make_urn(group.urn, type_, name),
                type=type_,
                name=name,
                id=_id_for(type_, name),
                parent=group.urn,
                dependencies=[],
                provider=None,
                custom=True,
                remote=False,
                inputs=props,
                options={"modelled": "pulumi-eks child (nodegroup.ts createMNGCustomLaunchTemplate): metadataOptions"},
            )
        )

    def RegisterResourceOutputs(self, request):
        if request.urn.split("::")[2] == "pulumi:pulumi:Stack":
            self.stack_outputs = plain(json_format.MessageToDict(request.outputs))
        return super().RegisterResourceOutputs(request)
