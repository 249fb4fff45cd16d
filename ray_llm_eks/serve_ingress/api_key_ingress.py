"""Ray Serve LLM's OpenAI ingress, the whole app behind the API key check (api_keys.py).

Named in the serve config as `ingress_cls_config: {ingress_cls: api_key_ingress:ApiKeyIngress}`
(Ray 2.58 `IngressClsConfig`, ray/llm/_internal/serve/core/ingress/builder.py): Ray's builder
routes DEFAULT_ENDPOINTS to the methods of this class (make_fastapi_ingress, ingress.py). vLLM's own
`api_key` is never consulted behind Ray's ingress, and an NLB cannot check keys: this is where
requests without a valid key stop, before they reach a model replica, and before their body is read
(api_keys.KeyGate, through GatedIngress); each endpoint checks the key again (key_checked)."""

from api_keys import GatedIngress, KeyRing, key_checked
from fastapi import Request
from fastapi.responses import JSONResponse
from ray.llm._internal.serve.core.ingress.ingress import DEFAULT_ENDPOINTS, OpenAiIngress
from ray.serve._private.http_util import ASGIAppReplicaWrapper

_RING = KeyRing()
# The hook GatedIngress overrides: without it the app would run unguarded, so the replica fails at import instead.
if not callable(getattr(ASGIAppReplicaWrapper, "_set_asgi_app", None)):
    raise ImportError("ray.serve's ASGIAppReplicaWrapper has no _set_asgi_app: the key gate cannot wrap the app")


def _json(status: int, body: dict, headers: dict) -> JSONResponse:
    return JSONResponse(status_code=status, content=body, headers=headers)


class ApiKeyIngress(GatedIngress, OpenAiIngress):
    """OpenAiIngress whose app is behind KeyGate and whose every routed endpoint (DEFAULT_ENDPOINTS) checks the key."""

    _gate_ring = _RING


for _name in DEFAULT_ENDPOINTS:
    setattr(ApiKeyIngress, _name, key_checked(getattr(OpenAiIngress, _name), _RING, Request, _json))
