"""`make check-upstream`'s code (tools/check_upstream.py is its entry point), one job per module:

- `entries`: UPGRADING.md's entries, parsed, and what is wrong with them without fetching anything;
- `sources`: the pinned upstream artefacts (installed packages, PyPI wheels, Go modules) and cutting a
  function's text out of them;
- `context`: one run's artefacts and the fingerprints of the upstream functions we mirror;
- `checks_vllm`, `checks_ray`, `checks_pulumi`, `checks_observability`, `checks_aiperf`: one function per
  automatic entry, re-checking one copy of upstream behaviour, grouped by upstream project;
- `known_issue_pins`: the versions we run held against the known issues' fixed versions;
- `registry`: which check re-checks which entry (`CHECKS`);
- `cli`: `main`, the command.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
