"""Image references: `registry/repository[:tag][@sha256:digest]`, split and pinned by digest with the
tag kept for people. No I/O: ray_llm_eks/adapters/registry.py asks the registry for a tag's digest."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ray_llm_eks.domain.core.facts import IMAGE_DIGEST, IMAGE_DIGEST_PLACEHOLDER

# What the `image` key accepts: a tag, a digest, or both (the tag then documents the digest).
PINNED_REFERENCE = rf"[\w./:-]+?(:[\w][\w.-]{{0,127}})?({IMAGE_DIGEST})?"


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str | None
    digest: str | None  # sha256:<hex>

    def text(self) -> str:
        return (
            f"{self.registry}/{self.repository}"
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


def parse(image: str) -> ImageRef:
    """The parts of a reference whose first path part is a registry host (the stack's images always are:
    the DLC's ECR registry, or your own `image`)."""
    name, _, digest = image.partition("@")
    registry, _, path = name.partition("/")
    repository, colon, tag = path.rpartition(":") if ":" in path else (path, "", "")
    return ImageRef(registry, repository, tag if colon else None, digest or None)


def digest_pinned(image: str) -> bool:
    return re.search(IMAGE_DIGEST + "$", image) is not None


def with_digest(image: str, digest: str) -> str:
    """The image by digest, its tag kept."""
    return ImageRef(**{**parse(image).__dict__, "digest": digest}).text()


def offline_pin(image: str) -> str:
    """What `make plan` shows for a tag it cannot resolve: the marked placeholder where the digest goes."""
    return image if digest_pinned(image) else f"{image}@{IMAGE_DIGEST_PLACEHOLDER}"
