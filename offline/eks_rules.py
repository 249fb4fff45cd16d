"""Input rules that the pulumi-eks provider enforces in its own (TypeScript) code, which Pulumi's
mocks never run. The offline plan applies them to what the program registers, so `make plan` fails
where `pulumi preview` would, with pulumi-eks's own words.

Source: pulumi/pulumi-eks v4.4.0, nodejs/eks/cluster/authenticationMode.ts (validateAuthenticationMode).
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
    if not _supports_access_entries(mode) and inputs.get("accessEntries"):
        state = f"set to '{mode}'" if mode is not None else "not set"
        raise PulumiEksRefusal(f"The 'accessEntries' property is not supported when 'authenticationMode' is {state}.")


RULES = {"eks:index:Cluster": check_cluster}


def check(type_: str, name: str, inputs: dict) -> None:
    rule = RULES.get(type_)
    if rule is None:
        return
    try:
        rule(inputs)
    except PulumiEksRefusal as refusal:
        raise PulumiEksRefusal(f"pulumi-eks refuses {type_} '{name}': {refusal}") from None
