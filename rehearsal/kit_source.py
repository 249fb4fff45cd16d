"""Which code a GPU kit's RayService specs were rendered from, so that a GPU machine refuses a kit made before the code
it runs changed (a spec without a serve option the checks now send, say) before it spends its minutes starting
engines. Standard library only: it runs on the GPU machine too, which cannot render a spec itself.

    python -m rehearsal.kit_source check KIT_FOLDER    exit 0 when the kit matches this checkout, else 3 and one line
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from rehearsal import ROOT

DIGEST_FILE = "rendered-from"
# What a spec is rendered from: the product's code and data, and the stack files.
SOURCES = ("ray_llm_eks",)
SUFFIXES = {".py", ".yaml", ".yml", ".json"}


def digest(root: Path = ROOT) -> str:
    """sha256 over the path and bytes of every source file, in path order."""
    files = sorted(
        path
        for top in SOURCES
        for path in (root / top).rglob("*")
        if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts
    )
    files += sorted(root.glob("Pulumi*.yaml"))
    total = hashlib.sha256()
    for path in files:
        total.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return total.hexdigest()


def write(folder: Path, root: Path = ROOT) -> Path:
    path = folder / DIGEST_FILE
    path.write_text(digest(root) + "\n")
    return path


def mismatch(folder: Path, root: Path = ROOT) -> str | None:
    """None when the kit in `folder` was rendered from this code, else why not, in one line."""
    path = folder / DIGEST_FILE
    if not path.exists():
        return f"{path}: missing, the kit predates this check: run `make gpu-wheels KIT_ONLY=1` before the hold"
    if (kit := path.read_text().strip()) != (here := digest(root)):
        return (f"{folder}: its RayService specs were rendered from other code than this checkout's (sources "
                f"{kit[:12]}, here {here[:12]}): run `make gpu-wheels KIT_ONLY=1` before the hold")  # fmt: skip
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "check":
        print("usage: python -m rehearsal.kit_source check KIT_FOLDER", file=sys.stderr)
        return 2
    if why := mismatch(Path(argv[1])):
        print(why, file=sys.stderr)
        return 3
    print(f"kit: rendered from this checkout's code ({digest()[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
