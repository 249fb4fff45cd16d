"""`make policy STACK=<stack>`: the policy pack's rules (policy/rules.py) over the offline plan's
resources, so CI enforces them without the Pulumi CLI. Exit 1 naming each violated policy."""

from __future__ import annotations

import argparse
import sys

from adapters.stackfile import ROOT
from offline.plan import Plan, precheck, root_message, run_program
from policy.rules import Resource, Violation, check_all, policies


def plan_resources(plan: Plan) -> list[Resource]:
    """What the program registered, as the rules see it (inputs, secrets as `[secret]`)."""
    return [Resource(r.type, r.name, r.urn, r.inputs, tuple(r.dependencies)) for r in plan.in_order()]


def violations(plan: Plan) -> list[Violation]:
    return check_all(plan_resources(plan), secrets_marked=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    args = parser.parse_args(argv)
    try:
        precheck(args.stack, ROOT)
        plan = run_program(args.stack, root=ROOT)
    except ValueError as err:  # a bad stack value: one line, as `make plan` prints it
        print(f"error: {root_message(err)}", file=sys.stderr)
        return 2
    found = violations(plan)
    for violation in found:
        print(violation, file=sys.stderr)
    names = len(policies())
    advice = [v for v in found if v.advisory]
    found = [v for v in found if not v.advisory]
    if found:
        failed = sorted({v.policy for v in found})
        print(f"stack {args.stack}: {len(failed)} of {names} policies violated: {', '.join(failed)}", file=sys.stderr)
        return 1
    advised = f" ({len(advice)} advisory warning(s) above)" if advice else ""
    print(f"stack {args.stack}: {names} policies passed on {len(plan.registrations)} resources (offline plan){advised}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
