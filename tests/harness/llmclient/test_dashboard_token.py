"""The Ray dashboard through the API server's proxy sends Ray's token (llmclient/metrics.py kube_dashboard): the
cluster requires it (ray_llm_eks/domain/security/ray_auth.py), and the proxy keeps Authorization for itself."""

from __future__ import annotations

import base64

from llmclient import metrics


class FakeKube:
    def __init__(self, secret: dict | None):
        self.secret, self.asked = secret, []

    def get_or_none(self, path: str):
        return self.secret if path.endswith("/secrets/ray-auth-token") else None

    def request_warned(self, method, path, body=None, content_type="application/json", extra_headers=None):
        self.asked.append((path, extra_headers))
        return {"applications": {}}, []


def test_the_token_from_its_secret_goes_as_x_ray_authorization():
    kube = FakeKube({"data": {"auth_token": base64.b64encode(b"tok-123").decode()}})
    fetch = metrics.kube_dashboard(kube, "llm", "llm-head-svc")
    assert fetch("/api/serve/applications/") == '{"applications": {}}'
    ((path, headers),) = kube.asked
    assert path == "/api/v1/namespaces/llm/services/llm-head-svc:8265/proxy/api/serve/applications/"
    assert headers == {"X-Ray-Authorization": "Bearer tok-123"}


def test_without_the_secret_nothing_is_sent():
    kube = FakeKube(None)
    metrics.kube_dashboard(kube, "llm", "llm-head-svc")("/x")
    assert kube.asked == [("/api/v1/namespaces/llm/services/llm-head-svc:8265/proxy/x", {})]
