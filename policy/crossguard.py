"""Adapters from pulumi-policy's validation arguments to the rules' Resource (no pulumi-policy import
here, so the adapters are tested without it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policy.rules import Policy, Resource


def _resource(r: Any) -> Resource:
    dependencies = tuple(getattr(d, "urn", d) for d in getattr(r, "dependencies", None) or [])
    return Resource(r.resource_type, r.name, r.urn, r.props, dependencies)


def resource_validator(policy: Policy) -> Callable[[Any, Callable], None]:
    """For ResourceValidationPolicy: runs before each resource is created or updated."""

    def validate(args: Any, report_violation: Callable) -> None:
        for message in policy.per_resource(_resource(args)):
            report_violation(message)

    return validate


def stack_validator(policy: Policy) -> Callable[[Any, Callable], None]:
    """For StackValidationPolicy: runs once over every resource of the stack."""

    def validate(args: Any, report_violation: Callable) -> None:
        for violation in policy.check(_resource(r) for r in args.resources):
            report_violation(violation.message, violation.resource.urn if violation.resource else None)

    return validate
