"""Which resources of a shipped stack a change would delete and create again: a resource whose URN is gone.

Pulumi knows a resource by its URN (stack, project, its type qualified by its parents' types, its name): a
component renamed, moved under another parent or given a new type token gets a new URN, and `pulumi up` then
deletes the old resource and creates a new one, unless the new one names the old URN in `aliases`. Each shipped
stack's URNs are recorded under offline/urns/ (one per line, sorted); `gone` lists the recorded ones that the
plan neither declares nor aliases, the test suite holds it empty, and

    python -m offline.urns --stack dev --write

records a stack's URNs again after a change meant to add or remove resources.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from offline import ROOT
from offline.mocks import urn_of

if TYPE_CHECKING:
    from offline.plan import Plan

URNS_DIR = ROOT / "offline" / "urns"


def recorded(stack: str, folder: Path = URNS_DIR) -> list[str]:
    path = folder / f"{stack}.txt"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


def answered(plan: Plan) -> set[str]:
    """Every URN the plan answers for: its resources' own and their aliases, a child's included where only
    its parent was aliased (the engine derives those: a child keeps its name under its parent's old URN)."""
    by_urn = plan.by_urn
    memo: dict[str, set[str]] = {}

    def known_as(urn: str) -> set[str]:
        if urn not in memo:
            registration = by_urn[urn]
            names = {urn, *registration.options.get("aliases", [])}
            parent = registration.parent
            if parent in by_urn:
                stack, project = urn.split("::")[0].removeprefix("urn:pulumi:"), urn.split("::")[1]
                names |= {
                    urn_of(stack, project, old, registration.type, registration.name)
                    for old in known_as(parent) - {parent}
                }
            memo[urn] = names
        return memo[urn]

    return set().union(*(known_as(urn) for urn in by_urn)) if by_urn else set()


def gone(plan: Plan, folder: Path = URNS_DIR) -> list[str]:
    """The recorded URNs of the plan's stack that `pulumi up` would delete: neither declared nor aliased."""
    answers = answered(plan)
    return [urn for urn in recorded(plan.stack, folder) if urn not in answers]


def write(plan: Plan, folder: Path = URNS_DIR) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{plan.stack}.txt"
    path.write_text("".join(f"{urn}\n" for urn in sorted(plan.by_urn)), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    from offline.plan import precheck, root_message, run_program

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--write", action="store_true", help="record the stack's URNs as they are now")
    args = parser.parse_args(argv)
    try:
        precheck(args.stack, ROOT)
        plan = run_program(args.stack, root=ROOT)
    except ValueError as err:
        print(f"error: {root_message(err)}", file=sys.stderr)
        return 2
    if args.write:
        print(f"wrote {write(plan)} ({len(plan.by_urn)} URNs)")
        return 0
    missing = gone(plan)
    for urn in missing:
        print(f"{urn}: recorded, and neither declared nor aliased: pulumi up would delete it", file=sys.stderr)
    print(f"stack {args.stack}: {len(recorded(args.stack))} recorded URNs, {len(missing)} gone")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
