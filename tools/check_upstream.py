"""`make check-upstream`: re-check, against the pinned upstream artefacts, what UPGRADING.md lists.

UPGRADING.md holds one entry per copy of upstream behaviour and per private API we use. This tool
reads it and, for every entry whose re-check says `make check-upstream`, runs that entry's checks
here: it fetches the pinned artefact (a wheel from PyPI with pip, a Go module with `go mod download`,
or the package installed in .venv), then compares what we copied with upstream's own text (vLLM's
argument table re-extracted and diffed, Ray's argument classes read field by field, vendored files
byte for byte) or fingerprints the upstream functions we mirror. A fingerprint is a hash of one
function's source, recorded at the version we read it at (tools/upstream_fingerprints.json): when a
new pin changes the function, the check fails naming it, so the copy is re-read instead of trusted.
Entries re-checked by hand are printed at the end.

This file is the entry point; the code is in tools/upstream/ (its __init__ says which module does what; a new
check goes in a `checks_*` module and in tools/upstream/registry.py's CHECKS).

    python tools/check_upstream.py              # run the automatic checks; exit 1 on any difference
    python tools/check_upstream.py --record     # after re-reading: record the fingerprints of the pins
    python tools/check_upstream.py --only ID    # one entry
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.upstream.cli import main

if __name__ == "__main__":
    sys.exit(main())
