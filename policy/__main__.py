"""The ray-llm-eks CrossGuard policy pack: `pulumi preview --policy-pack policy` (docs/security.md).
Every rule is mandatory and lives in policy/rules.py, which `make policy` runs offline too."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: `policy.rules`

from pulumi_policy import (
    EnforcementLevel,
    PolicyPack,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from policy.crossguard import resource_validator, stack_validator
from policy.rules import policies


def _pulumi_policies() -> list:
    # CrossGuard hands policies decrypted secrets: a Secret's data cannot be told from plaintext here.
    wrapped = []
    for rule in policies(secrets_marked=False):
        kind, validator = (
            (ResourceValidationPolicy, resource_validator(rule))
            if rule.per_resource is not None
            else (StackValidationPolicy, stack_validator(rule))
        )
        wrapped.append(
            kind(
                name=rule.name,
                description=rule.description,
                validate=validator,
                enforcement_level=EnforcementLevel.ADVISORY if rule.advisory else EnforcementLevel.MANDATORY,
            )
        )
    return wrapped


PolicyPack(name="ray-llm-eks", enforcement_level=EnforcementLevel.MANDATORY, policies=_pulumi_policies())
