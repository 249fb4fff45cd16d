"""Ray's own token authentication on the stack's Ray cluster (Ray 2.52 and later, `RAY_AUTH_MODE=token`): every
request to the dashboard (8265: its REST APIs, job submission, the Serve REST API that can redeploy the
application without the key check) and every gRPC call to the GCS, the raylets and the Ray client must carry
the cluster's token; what answers without it are the health checks (`/api/healthz`, `/api/gcs_healthz`,
`/api/local_raylet_healthz`, `/-/healthz`: Ray 2.58 dashboard/http_server_head.py public_exact_paths, which
KubeRay's probes call) and the metrics endpoints Prometheus scrapes (8080, 44217, 44227: plain Prometheus
exporters). The Serve proxy on 8000 is the application's, behind its API keys, and needs no token.

KubeRay 1.7 `rayClusterConfig.authOptions` (ray-operator apis/ray/v1/raycluster_types.go AuthOptions): with
`mode: token` it sets RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (from the Secret `secretName`, key `auth_token`) on
every Ray container, the autoscaler's and the wait-gcs-ready init container's (common/pod.go
SetContainerTokenAuthEnvVars), and sends the token on its own dashboard calls (utils/util.go
GetRayDashboardClientFunc). With `secretName` it creates no Secret of its own: the stack's (LlmService) holds a
random token, a Pulumi secret. Pure."""

from __future__ import annotations

import re

from ray_llm_eks.domain.core.errors import ConfigError

SECRET_NAME = "ray-auth-token"
SECRET_KEY = "auth_token"  # KubeRay 1.7 utils/constant.go RAY_AUTH_TOKEN_SECRET_KEY
# The first Ray with token authentication (Ray's docs, ray-security/token-auth: "available in Ray 2.52.0 or later").
FIRST_RAY = (2, 52, 0)
TOKEN_ENV = "RAY_AUTH_TOKEN"  # what Ray reads first (Ray's docs, token-authentication: token sources)


def auth_options() -> dict:
    """rayClusterConfig.authOptions: Ray's token authentication with the stack's Secret."""
    return {"mode": "token", "secretName": SECRET_NAME}


def check_ray_version(key: str, ray_version: str) -> str:
    """An image whose Ray has no token authentication would run with the dashboard open: refused."""
    found = tuple(int(n) for n in re.findall(r"\d+", ray_version)[:3])
    if found < FIRST_RAY:
        first = ".".join(map(str, FIRST_RAY))
        raise ConfigError(key, ray_version, f"Ray {first} or later: token authentication of the dashboard and GCS")
    return ray_version


MIN_TOKEN_CHARS = 32  # the random one is 48 letters and digits: 285 bits
TOKEN_RULE = f"at least {MIN_TOKEN_CHARS} printable characters without blanks"


def check_token(token: str) -> str:
    """A token of the user's own: long enough to guess no sooner than the random one, one line, no blanks (the
    Secret's value is sent as a header). Never shown in the refusal."""
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token) or not token.isprintable():
        raise ConfigError("rayAuthToken", "(not shown)", TOKEN_RULE)
    return token


def token_command(namespace: str) -> str:
    """How a person reads the token (for the dashboard's login, `ray job` or `serve` CLIs as RAY_AUTH_TOKEN)."""
    return f"kubectl -n {namespace} get secret {SECRET_NAME} -o jsonpath='{{.data.{SECRET_KEY}}}' | base64 -d"
