"""What a routine `pulumi up` must not change by itself: the serving image's digest and the EKS add-ons' versions.

A tag can be pushed again and an add-on's default (or, for pulumi-eks's own add-ons, its newest) version moves
with AWS: resolved at every `up`, either changes the pods or the add-ons without any input of the stack changing,
and a changed image replaces the RayService. So both are resolved once, by `make pin` (tools/pin.py, with the
deployer's AWS identity), and kept in the stack file: the digest beside the tag (`dlcImageTag:
<tag>@sha256:<digest>`, or `image: <repo>:<tag>@sha256:<digest>`), the add-ons' versions in `eksAddonVersions`.
An upgrade is then an input that changes: `make pin AGAIN=1` (or a new tag, which `make pin` pins). Outside dev
`pulumi up` refuses a stack without them; a dev stack still resolves at deploy, and is warned. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ray_llm_eks.domain.core.errors import ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import DEV_ENVIRONMENTS
from ray_llm_eks.domain.platform import image_ref
from ray_llm_eks.domain.platform.versions import EBS_CSI_ADDON, POD_IDENTITY_AGENT_ADDON

# Every EKS add-on a stack of ours may run: pulumi-eks's own three (nodejs/eks/cluster/cluster.ts, vpc-cni through
# addons/cni-addon.ts: each at the newest version for the cluster's minor unless given one) and ours.
PULUMI_EKS_ADDONS = ("vpc-cni", "kube-proxy", "coredns")
ADDONS = (*PULUMI_EKS_ADDONS, POD_IDENTITY_AGENT_ADDON, EBS_CSI_ADDON)
# EKS add-on versions: v<major>.<minor>.<patch>-eksbuild.<n> (`aws eks describe-addon-versions`).
ADDON_VERSION = re.compile(r"v\d+\.\d+\.\d+-eksbuild\.\d+")
KEY = "eksAddonVersions"
PIN_COMMAND = "make pin STACK=<stack>"
SHAPE = f"a mapping of EKS add-ons {yaml_text(ADDONS)} to versions such as v1.19.2-eksbuild.1"


def load_addon_versions(given: Mapping | None) -> dict[str, str]:
    """The stack's `eksAddonVersions` (None: unset), each name one we run and each version EKS's form."""
    versions = dict(given or {})
    for name, version in versions.items():
        if name not in ADDONS:
            raise ConfigError(f"{KEY}.{name}", version, f"an add-on the stack runs: {yaml_text(ADDONS)}")
        if not isinstance(version, str) or not ADDON_VERSION.fullmatch(version):
            raise ConfigError(f"{KEY}.{name}", version, "an add-on version such as v1.19.2-eksbuild.1")
    return versions


def unpinned(image: str, addon_versions: Mapping[str, str], builds_cluster: bool) -> list[str]:
    """What the stack leaves to be resolved at deploy: the image's digest, the add-ons without a version (only on a
    cluster the stack builds: it installs no add-on on an existing one)."""
    missing = [] if image_ref.digest_pinned(image) else ["the serving image's digest"]
    if builds_cluster:
        missing += [f"{KEY}.{name}" for name in ADDONS if name not in addon_versions]
    return missing


def require_pinned(environment: str, missing: list[str]) -> list[str]:
    """At deploy: outside dev, refuse a stack that would resolve anything (one line); in dev, the warning lines."""
    if not missing:
        return []
    said = ", ".join(missing)
    if environment not in DEV_ENVIRONMENTS:
        raise ConfigError(
            KEY if all(m.startswith(KEY) for m in missing) else "dlcImageTag",
            said,
            f"pinned in the stack file in environment {environment}, so that no `up` changes them by itself: "
            f"{PIN_COMMAND} resolves them once and keeps them (make up runs it)",
        )
    return [
        f"{said} resolved at this deploy: when the tag or AWS's default moves, the next `up` changes them (a new "
        f"image replaces the RayService); {PIN_COMMAND} keeps them"
    ]
