"""`make gpu-wheels`' kit step (tools/gpu/wheels.sh runs it): what the GPU machine cannot make itself, written into
one folder. The RayService spec of each GPU_STACKS entry, rendered here (the GPU machine has no botocore, so it
cannot read a stack), botocore's facts as this machine cached them (make verify and the bench read them there), and
which code the specs came from (rehearsal/kit_source.py).

    python -m rehearsal.kit STACKS FOLDER
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.adapters.stackfile import StackFileError
from ray_llm_eks.domain.core.errors import ConfigError
from rehearsal import kit_source
from rehearsal.prepare import kit_specs
from rehearsal.substitute import CannotRehearse


def write(stacks: str, folder: Path) -> list[Path]:
    """Write the kit into `folder` (created if missing); the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, spec in kit_specs(stacks).items():
        path = folder / f"{name}.rayservice.json"
        path.write_text(json.dumps(spec, indent=1))
        written.append(path)
    botocore_facts.load()  # rendering the specs read them; a cache that another process removed is written again
    written.append(Path(shutil.copy(botocore_facts.cache_file(), folder)))
    written.append(kit_source.write(folder))  # the GPU machine refuses the kit once this code changes
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m rehearsal.kit STACKS FOLDER (STACKS: dev,baseline or dev@selectivePd=1500,...)")
        return 2
    try:
        written = write(argv[0], Path(argv[1]))
    except (ConfigError, StackFileError, CannotRehearse) as exc:
        print(f"gpu kit: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"kit: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
