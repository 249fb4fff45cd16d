"""`make pin STACK=<stack> [AGAIN=1]`: resolve, once, what `pulumi up` would otherwise resolve at every run (the
serving image's digest, the EKS add-ons' versions: ray_llm_eks/domain/platform/pins.py) and keep it in
Pulumi.<stack>.yaml with `pulumi config set`. What the stack already keeps stays, unless AGAIN=1 (an upgrade:
the tag's digest now, EKS's default versions now).

With the deployer's own AWS identity: the image's registry through ray_llm_eks/adapters/registry.py (ECR's password
from `aws ecr get-login-password`), the add-ons' default versions from `aws eks describe-addon-versions`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ray_llm_eks.adapters import registry, stack
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.platform import image_ref, pins
from ray_llm_eks.domain.stack.settings import Settings

ROOT = Path(__file__).resolve().parents[1]  # the checkout, whose stack files this reads

# Which version of an add-on EKS installs by default for a Kubernetes version (AWS CLI v2, JMESPath).
DEFAULT_VERSION_QUERY = "addons[0].addonVersions[?compatibilities[?defaultVersion]].addonVersion | [0]"


def pins_to_set(
    settings: Settings,
    given_image: str | None,
    digest_of: Callable[[str], str],
    default_version: Callable[[str, str], str],
    again: bool = False,
) -> list[tuple[str, str]]:
    """(config path, value) for `pulumi config set --path`: what the stack does not keep yet (everything, `again`).
    `given_image`: the stack's own `image`, if it sets one (else the DLC's tag is pinned in dlcImageTag)."""
    found = []
    image = settings.serving.image
    if again or not image_ref.digest_pinned(image):
        unpinned = image.split("@", 1)[0]
        digest = digest_of(unpinned)
        if given_image is not None:
            found.append(("image", image_ref.with_digest(unpinned, digest)))
        else:
            found.append(("dlcImageTag", f"{image_ref.parse(unpinned).tag}@{digest}"))
    if not settings.deploy_mode.existing_cluster:
        kept = dict(settings.cluster.addon_versions)
        for name in pins.ADDONS:
            if again or name not in kept:
                found.append((f'{pins.KEY}["{name}"]', default_version(name, settings.cluster.kubernetes_version)))
    return found


def _aws(*args: str) -> str:
    done = subprocess.run(["aws", *args], capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ConfigError("aws " + " ".join(args[:2]), said, "an answer from AWS with the deployer's identity")
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--again", action="store_true", help="resolve what the stack keeps too (an upgrade)")
    args = parser.parse_args(argv)
    try:
        config = stack.stack_file(args.stack, ROOT)
        settings = stack.load_settings(config)
        region = settings.region

        def digest_of(image: str) -> str:
            ref = image_ref.parse(image)
            ecr = registry.ECR_HOST.fullmatch(ref.registry)
            basic = ("AWS", _aws("ecr", "get-login-password", "--region", region)) if ecr else None
            return registry.manifest_digest(registry.Registry(ref.registry, basic=basic), ref.repository, ref.tag or "")

        def default_version(addon: str, kubernetes: str) -> str:
            version = _aws(
                "eks", "describe-addon-versions", "--region", region, "--addon-name", addon,
                "--kubernetes-version", kubernetes, "--query", DEFAULT_VERSION_QUERY, "--output", "text",
            )  # fmt: skip
            if not pins.ADDON_VERSION.fullmatch(version):
                raise ConfigError(f"{pins.KEY}.{addon}", version, f"EKS's default version for Kubernetes {kubernetes}")
            return version

        given_image = config.values.get(f"{stack.PROJECT}:image")
        found = pins_to_set(settings, given_image, digest_of, default_version, args.again)
    except (ConfigError, registry.DigestLookupFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path, value in found:
        print(f"{args.stack}: {path} = {value}")
        # The project's own namespace, which a --path key leaves implicit (`pulumi config set --help`).
        done = subprocess.run(["pulumi", "config", "set", "--path", path, value, "--stack", args.stack])
        if done.returncode != 0:
            return done.returncode
    if not found:
        print(f"{args.stack}: the image's digest and every add-on's version are kept already (AGAIN=1 resolves anew)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
