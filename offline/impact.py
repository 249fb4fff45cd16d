"""`make diff A=<plan dir> B=<plan dir>`: what the change from plan A to plan B does to a running service
(served in place, replicas restarted, a new RayCluster beside the old one, the RayService replaced with a gap,
nodes replaced), from the two plans' resources.json; the judging is ray_llm_eks/domain/cluster/upgrades.py's."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from ray_llm_eks.domain.cluster import upgrades


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    try:
        old, new = (json.loads((d / "resources.json").read_text(encoding="utf-8")) for d in (args.old, args.new))
        outputs = [json.loads((d / "outputs.json").read_text(encoding="utf-8")) for d in (args.old, args.new)]
    except (OSError, json.JSONDecodeError) as err:
        print(
            f"error: {err} (make plan writes resources.json and outputs.json into each plan directory)", file=sys.stderr
        )
        return 2
    regions = tuple(o.get("region") for o in outputs)  # the region each stack planned for (its output)
    print(upgrades.report(upgrades.impacts(old, new, yaml.safe_load, regions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
