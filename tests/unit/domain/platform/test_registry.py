"""ray_llm_eks/adapters/registry.py against a fake Docker Registry v2 on the loopback: the HEAD manifest request,
its Bearer and Basic challenges, the digest header; and the pinning the program applies."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from ray_llm_eks.adapters import registry
from ray_llm_eks.domain.core.facts import IMAGE_DIGEST_PLACEHOLDER
from ray_llm_eks.domain.platform import image_ref

DIGEST = "sha256:" + "5e" * 32
TOKEN = "anonymous-pull-token"
BASIC = ("AWS", "ecr-password")


class FakeRegistry(BaseHTTPRequestHandler):
    """`ray:v1` exists; `bearer` repositories challenge with a token service, `basic` ones with Basic."""

    seen: ClassVar[list] = []

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        assert self.path.startswith("/token?") and "scope=repository%3Abearer%2Fray%3Apull" in self.path
        body = json.dumps({"token": TOKEN}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        FakeRegistry.seen.append((self.path, self.headers.get("Accept"), self.headers.get("Authorization")))
        kind, _, rest = self.path.removeprefix("/v2/").partition("/")
        auth = self.headers.get("Authorization")
        port = self.server.server_address[1]
        if kind == "bearer" and auth != f"Bearer {TOKEN}":
            challenge = (
                f'Bearer realm="http://127.0.0.1:{port}/token",service="fake",scope="repository:bearer/ray:pull"'
            )
            return self._answer(401, {"WWW-Authenticate": challenge})
        pair = "Basic " + base64.b64encode(":".join(BASIC).encode()).decode()
        if kind == "basic" and auth != pair:
            return self._answer(401, {"WWW-Authenticate": 'Basic realm="fake"'})
        if not rest.endswith("ray/manifests/v1"):
            return self._answer(404, {})
        self._answer(200, {"Docker-Content-Digest": DIGEST})

    def _answer(self, code, headers):
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def fake():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_tag_digest_through_the_anonymous_bearer_token(fake):
    FakeRegistry.seen.clear()
    got = registry.manifest_digest(registry.Registry(fake, scheme="http"), "bearer/ray", "v1")
    assert got == DIGEST
    (first, second) = FakeRegistry.seen
    assert first[2] is None and second[2] == f"Bearer {TOKEN}"
    assert first[1].startswith("application/vnd.oci.image.index.v1+json")  # the index's digest, not one platform's


def test_basic_credentials_and_their_absence(fake):
    ecr_like = registry.Registry(fake, scheme="http", basic=BASIC)
    assert registry.manifest_digest(ecr_like, "basic/ray", "v1") == DIGEST
    with pytest.raises(registry.DigestLookupFailed, match="asks for basic authentication"):
        registry.manifest_digest(registry.Registry(fake, scheme="http"), "basic/ray", "v1")


def test_an_unknown_tag_and_an_unreachable_registry_are_one_line(fake):
    with pytest.raises(registry.DigestLookupFailed, match="HTTP 404"):
        registry.manifest_digest(registry.Registry(fake, scheme="http"), "open/ray", "v2")
    with pytest.raises(registry.DigestLookupFailed, match=r"127\.0\.0\.1:9"):
        registry.manifest_digest(registry.Registry("127.0.0.1:9", scheme="http"), "open/ray", "v1")


def test_pinning_keeps_the_tag_and_offline_shows_the_placeholder(fake, monkeypatch):
    image = "763104351884.dkr.ecr.us-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0.0"
    assert registry.pinned_image(image, deploying=False) == f"{image}@{IMAGE_DIGEST_PLACEHOLDER}"
    pinned = f"{image}@{DIGEST}"
    assert registry.pinned_image(pinned, deploying=True) == pinned  # a digest in the stack: no lookup
    # At deploy: ECR's host gets ECR's credentials, then the registry's digest.
    asked = []
    monkeypatch.setattr(registry, "ecr_credentials", lambda account: asked.append(account) or BASIC)
    monkeypatch.setattr(registry, "manifest_digest", lambda reg, repo, tag: DIGEST if reg.basic == BASIC else "")
    assert registry.pinned_image(image, deploying=True) == pinned and asked == ["763104351884"]
    monkeypatch.setattr(registry, "ecr_credentials", lambda account: None)  # the mocks' answer: no token
    assert registry.pinned_image(image, deploying=True) == f"{image}@{IMAGE_DIGEST_PLACEHOLDER}"
    assert image_ref.parse(pinned) == image_ref.ImageRef(
        "763104351884.dkr.ecr.us-east-1.amazonaws.com", "ray", "serve-llm-cuda-v1.0.0", DIGEST
    )
