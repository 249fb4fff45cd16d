"""Input rules that the pulumi-eks provider enforces in its own (TypeScript) code, which Pulumi's
mocks never run. The offline plan applies them to what the program registers, so `make plan` fails
where `pulumi preview` would, with pulumi-eks's own words.

Sources: pulumi/pulumi-eks (v4.3.0 + dependency bumps, whose Cluster and ManagedNodeGroup schema
equals the Python SDK 4.4.0's): nodejs/eks/cluster/authenticationMode.ts (validateAuthenticationMode),
nodejs/eks/nodes/nodegroup.ts (createManagedNodeGroupInternal), nodejs/eks/nodes/userdata.ts.
"""

from __future__ import annotations

AUTHENTICATION_MODES = ("CONFIG_MAP", "API_AND_CONFIG_MAP", "API")


class PulumiEksRefusal(ValueError):
    """pulumi-eks would refuse these inputs at preview."""


def _supports_config_map(mode: str | None) -> bool:
    return not mode or mode in ("CONFIG_MAP", "API_AND_CONFIG_MAP")


def _supports_access_entries(mode: str | None) -> bool:
    return mode in ("API", "API_AND_CONFIG_MAP")


def check_cluster(inputs: dict) -> None:
    """validateAuthenticationMode, rule by rule, with its messages."""
    mode = inputs.get("authenticationMode")
    if mode and mode not in AUTHENTICATION_MODES:
        raise PulumiEksRefusal(
            f"Invalid value for authenticationMode: {mode}. Allowed values are: {', '.join(AUTHENTICATION_MODES)}."
        )
    if not _supports_config_map(mode):
        for prop in ("roleMappings", "userMappings"):
            if prop in inputs:
                raise PulumiEksRefusal(
                    f"The '{prop}' property is not supported when 'authenticationMode' is set to '{mode}'."
                )
        if inputs.get("instanceRoles"):  # "InstanceRoles is special as it permits empty values"
            raise PulumiEksRefusal(
                f"The 'instanceRoles' property does not support non-empty values when 'authenticationMode' is set "
                f"to '{mode}'."
            )
    if (inputs.get("autoMode") or {}).get("enabled") and not _supports_access_entries(mode):  # cluster.ts
        raise PulumiEksRefusal(
            "Access entries are required when using EKS Auto Mode. Use the authentication mode 'API' or "
            "'API_AND_CONFIG_MAP'."
        )
    if not _supports_access_entries(mode) and inputs.get("accessEntries"):
        state = f"set to '{mode}'" if mode is not None else "not set"
        raise PulumiEksRefusal(f"The 'accessEntries' property is not supported when 'authenticationMode' is {state}.")


# userdata.ts customUserDataArgs; nodegroup.ts customLaunchTemplateArgs adds the rest.
CUSTOM_USER_DATA_ARGS = ("bootstrapExtraArgs", "kubeletExtraArgs", "bottlerocketSettings", "nodeadmExtraOptions")
CUSTOM_LAUNCH_TEMPLATE_ARGS = (*CUSTOM_USER_DATA_ARGS, "enableIMDSv2", "userData", "amiId", "enableEfaSupport")


def check_managed_node_group(inputs: dict) -> None:
    """createManagedNodeGroupInternal's validation errors, first one first."""
    reasons = []
    if inputs.get("nodeRole") and inputs.get("nodeRoleArn"):
        reasons.append("You cannot specify both nodeRole and nodeRoleArn when creating a managed node group.")
    for key in ("gpu", "amiType"):
        if inputs.get("amiId") and inputs.get(key):
            reasons.append(f"You cannot specify both amiId and {key} when creating a managed node group.")
    if not inputs.get("nodeRole") and not inputs.get("nodeRoleArn"):
        reasons.append("An IAM role, or role ARN must be provided to create a managed node group")
    if inputs.get("enableEfaSupport") and not inputs.get("placementGroupAvailabilityZone"):
        reasons.append("You must specify placementGroupAvailabilityZone when enabling EFA support.")
    if inputs.get("launchTemplate") and any(k in inputs for k in CUSTOM_LAUNCH_TEMPLATE_ARGS):
        reasons.append(
            "If you provide a custom launch template, you cannot provide any of "
            f"{', '.join(CUSTOM_LAUNCH_TEMPLATE_ARGS)}. "
            "Please include these in the launch template that you are providing."
        )
    if inputs.get("userData") and any(k in inputs for k in CUSTOM_USER_DATA_ARGS):
        reasons.append(
            f"If you provide custom userData, you cannot provide any of {', '.join(CUSTOM_USER_DATA_ARGS)}."
            " Please include these in the userData that you are providing."
        )
    if reasons:
        raise PulumiEksRefusal(f"The input properties for the managed node group are invalid: {' '.join(reasons)}")


def managed_launch_template(inputs: dict) -> dict | None:
    """The metadata options of the launch template pulumi-eks builds inside a ManagedNodeGroup, the one
    field of it the offline plan models (the policy pack reads it): None where pulumi-eks builds none
    (requiresCustomLaunchTemplate); createMNGCustomLaunchTemplate writes hop limit 2 under enableIMDSv2
    and nothing (the AMI's default) without it."""
    if not any(k in inputs for k in CUSTOM_LAUNCH_TEMPLATE_ARGS):
        return None
    if "enableIMDSv2" not in inputs:
        return {}
    tokens = "required" if inputs["enableIMDSv2"] else "optional"
    return {"metadataOptions": {"httpTokens": tokens, "httpPutResponseHopLimit": 2, "httpEndpoint": "enabled"}}


RULES = {"eks:index:Cluster": check_cluster, "eks:index:ManagedNodeGroup": check_managed_node_group}


def check(type_: str, name: str, inputs: dict) -> None:
    rule = RULES.get(type_)
    if rule is None:
        return
    try:
        rule(inputs)
    except PulumiEksRefusal as refusal:
        raise PulumiEksRefusal(f"pulumi-eks refuses {type_} '{name}': {refusal}") from None
