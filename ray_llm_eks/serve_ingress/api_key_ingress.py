"""Ray Serve LLM's OpenAI ingress, every endpoint behind the API key check (api_keys.py).

Named in the serve config as `ingress_cls_config: {ingress_cls: api_key_ingress:ApiKeyIngress}`
(Ray 2.58 `IngressClsConfig`, ray/llm/_internal/serve/core/ingress/builder.py): Ray's builder
routes DEFAULT_ENDPOINTS to the methods of this class (make_fastapi_ingress, ingress.py). vLLM's own
`api_key` is never consulted behind Ray's ingress, and an NLB cannot check keys: this is where
requests without a valid key stop, before they reach a model replica."""

from api_keys import KeyRing, key_checked
from fastapi import Request
from fastapi.responses import JSONResponse
from ray.llm._internal.serve.core.ingress.ingress import DEFAULT_ENDPOINTS, OpenAiIngress

_RING = KeyRing()


def _json(status: int, body: dict, headers: dict) -> JSONResponse:
    return JSONResponse(status_code=status, content=body, headers=headers)


class ApiKeyIngress(OpenAiIngress):
    """OpenAiIngress whose every routed endpoint (DEFAULT_ENDPOINTS) first checks the key."""


for _name in DEFAULT_ENDPOINTS:
    setattr(ApiKeyIngress, _name, key_checked(getattr(OpenAiIngress, _name), _RING, Request, _json))
