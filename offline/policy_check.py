"""`make policy STACK=<stack>`: the policy pack's rules (policy/rules.py) over the offline plan's
resources, so CI enforces them without the Pulumi CLI. Exit 1 naming each violated policy."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from offline import ROOT, chart_render, checkov_scan
from offline.plan import Plan, precheck, root_message, run_program
from policy.rules import Resource, Violation, check_all, policies


def plan_resources(plan: Plan) -> list[Resource]:
    """What the program registered, as the rules see it (inputs, secrets as `[secret]`)."""
    return [Resource(r.type, r.name, r.urn, r.inputs, tuple(r.dependencies)) for r in plan.in_order()]


def violations(plan: Plan) -> list[Violation]:
    return check_all(plan_resources(plan), secrets_marked=True)


def kube_version(plan: Plan) -> str | None:
    """The cluster's Kubernetes version, for `helm template --kube-version` (None on an existing cluster)."""
    return next((str(r.inputs["version"]) for r in plan.in_order() if r.type == "eks:index:Cluster"), None)


@dataclass(frozen=True)
class CheckovResult:
    failures: list[checkov_scan.Failure]
    unjustified: list[checkov_scan.Failure]
    not_scanned: list[str]  # one line per chart that could not be had
    objects: int  # what checkov read
    charts: int  # charts rendered


def checkov_check(
    manifests: dict[str, dict],
    checkov: Path,
    charts: Path | None = None,
    kube_version: str | None = None,
    skips: Path = checkov_scan.SKIPS_FILE,
    allow_pull: bool = False,
) -> CheckovResult:
    """checkov over the plan's objects, the Ray pods and every chart that can be had, rendered with the plan's
    values; each failure against the justifications."""
    rendered = chart_render.rendered(manifests, charts, kube_version=kube_version, allow_pull=allow_pull)
    docs = checkov_scan.scanned(manifests, rendered.docs)
    failures = checkov_scan.run(checkov, docs)
    unjustified = checkov_scan.unjustified(failures, checkov_scan.load_skips(skips))
    releases = len(chart_render.releases(manifests))
    return CheckovResult(failures, unjustified, rendered.not_scanned, len(docs), releases - len(rendered.not_scanned))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument(
        "--checkov", type=Path, help="checkov's executable: also scan the plan's objects, Ray pods and rendered charts"
    )
    parser.add_argument("--charts", type=Path, help="a folder of chart archives (<chart>-<version>.tgz) to render")
    # Off unless asked: a pull reaches the chart's repository, and CI and most test runs reach no network.
    parser.add_argument("--pull-charts", action="store_true", help="helm pull the archives found nowhere else")
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
        start = time.monotonic()
        result = checkov_check(
            plan.manifests(), args.checkov, args.charts, kube_version(plan), allow_pull=args.pull_charts
        )
        for line in result.not_scanned:
            print(line)
        unjustified = result.unjustified
        for failure in unjustified:
            print(f"{failure} (not justified in policy/checkov-skips.yaml)", file=sys.stderr)
        print(
            f"stack {args.stack}: checkov: {len(result.failures)} failed check(s), {len(unjustified)} not justified"
            f" ({result.objects} objects, {result.charts} chart(s) rendered, {len(result.not_scanned)} not;"
            f" {time.monotonic() - start:.0f} s)"
        )
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
