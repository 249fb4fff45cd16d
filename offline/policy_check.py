"""`make policy STACK=<stack>`: the policy pack's rules (policy/rules.py) over the offline plan's
resources, so CI enforces them without the Pulumi CLI. Exit 1 naming each violated policy."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adapters.stackfile import ROOT
from offline import checkov_scan
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
    parser.add_argument("--checkov", type=Path, help="checkov's executable: also scan the plan's objects and Ray pods")
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
    unjustified = []
    if args.checkov:
        failures = checkov_scan.run(args.checkov, checkov_scan.scanned(plan.manifests()))
        unjustified = checkov_scan.unjustified(failures, checkov_scan.load_skips())
        for failure in unjustified:
            print(f"{failure} (not justified in policy/checkov-skips.yaml)", file=sys.stderr)
        print(f"stack {args.stack}: checkov: {len(failures)} failed check(s), {len(unjustified)} not justified")
    advice = [v for v in found if v.advisory]
    found = [v for v in found if not v.advisory]
    if unjustified and not found:
        return 1
    if found:
        failed = sorted({v.policy for v in found})
        print(f"stack {args.stack}: {len(failed)} of {names} policies violated: {', '.join(failed)}", file=sys.stderr)
        return 1
    advised = f" ({len(advice)} advisory warning(s) above)" if advice else ""
    print(f"stack {args.stack}: {names} policies passed on {len(plan.registrations)} resources (offline plan){advised}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
