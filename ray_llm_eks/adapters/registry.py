"""The digest a registry serves for an image tag: the Docker Registry HTTP API v2 (the OCI
distribution spec) answers `HEAD /v2/<repository>/manifests/<tag>` with the manifest's digest in the
`Docker-Content-Digest` header, without downloading anything else. The program pins the serving image
to it at `pulumi preview`/`up` (ray_llm_eks/domain/platform/image_ref.py); `make plan` never calls a registry.

Authentication: a registry that answers 401 with a `Bearer` challenge (public registries) gets an
anonymous token from the challenge's realm; ECR answers with a `Basic` challenge and takes the
credentials of ECR's GetAuthorizationToken (`ecr_credentials`, with the deployer's own AWS identity)."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace

from ray_llm_eks.domain.platform import image_ref
from ray_llm_eks.domain.stack.settings import Settings

# The manifest kinds a tag may name, index first: a multi-architecture tag's digest is its index's,
# which is what the kubelet resolves the tag to (OCI image-spec media types, Docker's manifest list).
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TIMEOUT_SECONDS = 20


class DigestLookupFailed(RuntimeError):
    """The registry did not say which digest the tag names: one line."""


@dataclass(frozen=True)
class Registry:
    host: str  # e.g. 763104351884.dkr.ecr.us-east-1.amazonaws.com
    scheme: str = "https"  # http only for a registry on the loopback (the tests' fake)
    basic: tuple[str, str] | None = None  # user, password (ECR's authorization token)


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    kind, _, rest = header.partition(" ")
    return kind.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


def _request(url: str, method: str, headers: dict[str, str]):
    return urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers), timeout=TIMEOUT_SECONDS)


def _bearer_token(params: dict[str, str]) -> str:
    realm = params.get("realm")
    if not realm:
        raise DigestLookupFailed("the registry's Bearer challenge names no realm")
    query = urllib.parse.urlencode({k: v for k, v in params.items() if k in ("service", "scope")})
    with _request(f"{realm}?{query}" if query else realm, "GET", {}) as answer:
        body = json.loads(answer.read())
    token = body.get("token") or body.get("access_token")
    if not token:
        raise DigestLookupFailed(f"the token service {realm} returned no token")
    return token


def manifest_digest(registry: Registry, repository: str, tag: str) -> str:
    """`sha256:<hex>` of the manifest `repository:tag` names at `registry`."""
    url = f"{registry.scheme}://{registry.host}/v2/{repository}/manifests/{tag}"
    headers = {"Accept": ACCEPT}
    try:
        try:
            answer = _request(url, "HEAD", headers)
        except urllib.error.HTTPError as refused:
            if refused.code != 401:
                raise
            kind, params = _challenge(refused.headers.get("WWW-Authenticate", ""))
            if kind == "bearer":
                headers["Authorization"] = f"Bearer {_bearer_token(params)}"
            elif kind == "basic" and registry.basic is not None:
                pair = base64.b64encode(":".join(registry.basic).encode()).decode()
                headers["Authorization"] = f"Basic {pair}"
            else:
                raise DigestLookupFailed(
                    f"{registry.host} asks for {kind or 'no'} authentication it cannot give"
                ) from None
            answer = _request(url, "HEAD", headers)
        with answer:
            digest = answer.headers.get("Docker-Content-Digest", "")
    except urllib.error.HTTPError as error:
        raise DigestLookupFailed(f"{url}: HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        raise DigestLookupFailed(f"{url}: {getattr(error, 'reason', error)}") from None
    if not DIGEST.fullmatch(digest):
        raise DigestLookupFailed(f"{url}: no sha256 Docker-Content-Digest in the answer (got {digest!r})")
    return digest


def ecr_credentials(registry_id: str) -> tuple[str, str] | None:
    """ECR's authorization token for an account's registry (user `AWS`), through pulumi-aws (a blocking
    invoke with the deployer's identity, which ecr:GetAuthorizationToken must allow; a refusal stops
    the program there). None where the answer holds no token: only the offline plan's mocks answer so."""
    import pulumi_aws as aws  # here: the tests of the HTTP path need no Pulumi engine

    token = aws.ecr.get_authorization_token(registry_id=registry_id)
    return (token.user_name, token.password) if token.user_name and token.password else None


# ECR's registry hosts: <account>.dkr.ecr.<region>.amazonaws.com (.com.cn in China).
ECR_HOST = re.compile(r"(\d{12})\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?")


def with_pinned_image(settings: Settings, deploying: bool) -> Settings:
    """The settings whose serving image is pinned_image's."""
    return replace(settings, serving=replace(settings.serving, image=pinned_image(settings.serving.image, deploying)))


def pinned_image(image: str, deploying: bool) -> str:
    """The image by digest, its tag kept: as given where it names a digest already; offline (`make
    plan`), the marked placeholder; at preview/up, the digest the registry serves for the tag now."""
    if image_ref.digest_pinned(image):
        return image
    if not deploying:
        return image_ref.offline_pin(image)
    ref = image_ref.parse(image)
    ecr = ECR_HOST.fullmatch(ref.registry)
    basic = ecr_credentials(ecr.group(1)) if ecr else None
    if ecr and basic is None:  # no AWS behind the program (a test's simulated deploy): as offline
        return image_ref.offline_pin(image)
    try:
        registry = Registry(ref.registry, basic=basic)
        digest = manifest_digest(registry, ref.repository, ref.tag or "")
    except DigestLookupFailed as error:
        raise DigestLookupFailed(
            f"image {image}: its digest could not be looked up ({error}); pin it in the stack instead: "
            "image: <repository>:<tag>@sha256:<digest> (with rayVersion)"
        ) from None
    return image_ref.with_digest(image, digest)
