"""`make check-upstream`: re-check, against the pinned upstream artefacts, what UPGRADING.md lists.

The command (tools/check_upstream.py runs `main`; the line above is its --help description): print what is wrong
with UPGRADING.md itself, run the checks of the automatic entries chosen, list the entries re-checked by hand,
and with --record write the fingerprints of the pins.
"""

from __future__ import annotations

import argparse
import json

from tools.upstream import ROOT
from tools.upstream.context import FINGERPRINTS, Context
from tools.upstream.entries import AUTOMATIC, UPGRADING, entry_problems, parse_entries
from tools.upstream.registry import CHECKS
from tools.upstream.sources import Unavailable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record the fingerprints of the pinned versions")
    parser.add_argument("--only", action="append", default=[], metavar="ID", help="one entry (repeatable)")
    args = parser.parse_args(argv)

    entries = parse_entries(UPGRADING.read_text())
    problems = entry_problems(entries)
    for problem in problems:
        print(f"UPGRADING.md: {problem}")
    recorded = json.loads(FINGERPRINTS.read_text()) if FINGERPRINTS.exists() else {}
    ctx = Context(recorded, args.record)
    failed = bool(problems)
    chosen = [e for e in entries if not args.only or e.id in args.only]
    print(f"Automatic checks ({AUTOMATIC}):")
    for entry in [e for e in chosen if e.automatic and e.id in CHECKS]:
        try:
            found = CHECKS[entry.id](ctx)
        except (Unavailable, FileNotFoundError, KeyError) as err:
            found = [f"could not run: {err}"]
        failed |= bool(found)
        print(f"  {'FAILED' if found else 'ok':<7} {entry.id}")
        for line in found:
            print(f"          {line}")
    print("By hand (UPGRADING.md says how, per entry):")
    for entry in [e for e in chosen if not e.automatic]:
        print(f"  {entry.id}: {entry.fields.get('Re-check', '')}")
    if args.record:
        FINGERPRINTS.write_text(json.dumps(ctx.recorded, indent=2, sort_keys=True) + "\n")
        print(f"recorded fingerprints in {FINGERPRINTS.relative_to(ROOT)}")
    return 1 if failed else 0
