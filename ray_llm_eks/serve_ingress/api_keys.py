"""The API key check of the serving endpoint, free of Ray so the project's tests run it as it runs
in the pods. Shipped into every Ray pod with api_key_ingress.py (a ConfigMap, see
ray_llm_eks/domain/serving/api_keys.py).

Keys live in a file mounted from a Kubernetes Secret, one per line. The file is read again when it
changes (kubelet refreshes a mounted Secret within about a minute), so rotating is: add the new
key, move the clients, remove the old key; no pod restarts. An empty or missing file refuses all
requests (fails closed).

KeyGate sits in front of the whole ingress app, before routing and FastAPI's parsing: a request without a
valid key is answered 401 before a byte of its body is read (a keyless request with a bad body gets 401, not
422 naming the fields; a keyless 50 MB body costs its headers), /docs and /openapi.json included; a body over
the limit is answered 413 before it is parsed."""

from __future__ import annotations

import functools
import hmac
import inspect
import json
import os
import typing
from collections.abc import Callable

KEYS_FILE_ENV = "RAY_LLM_EKS_API_KEYS_FILE"
DEFAULT_KEYS_FILE = "/etc/ray-llm-eks/api-keys/keys"
MAX_BODY_ENV = "RAY_LLM_EKS_MAX_REQUEST_BYTES"  # the stack's maxRequestBytes (ray_llm_eks/domain/serving/api_keys.py)
DEFAULT_MAX_BODY_BYTES = 8 * 2**20  # only where the variable is missing; the stack always sets it
_REQUEST_PARAM = "_api_key_request"


class KeyRing:
    """The valid keys, reloaded when the file's modification time or size changes."""

    def __init__(self, path: str | None = None):
        self.path = path or os.environ.get(KEYS_FILE_ENV, DEFAULT_KEYS_FILE)
        self._stamp: tuple[float, int] | None = None
        self._keys: tuple[bytes, ...] = ()

    def keys(self) -> tuple[bytes, ...]:
        try:
            stat = os.stat(self.path)
        except OSError:
            self._stamp, self._keys = None, ()
            return ()
        stamp = (stat.st_mtime, stat.st_size)
        if stamp != self._stamp:
            with open(self.path, encoding="utf-8") as keys_file:
                self._keys = tuple(line.strip().encode() for line in keys_file if line.strip())
            self._stamp = stamp
        return self._keys

    def allows(self, authorization: str | None) -> bool:
        """`Authorization: Bearer <key>` (what OpenAI clients send), compared in constant time."""
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return False
        candidate = given.strip().encode()
        # Every key is compared, so timing tells nothing about which one matched.
        return sum(hmac.compare_digest(candidate, key) for key in self.keys()) > 0


def refusal() -> tuple[int, dict, dict]:
    """Status, body (OpenAI's error shape) and headers of a refused request."""
    body = {
        "error": {
            "message": "Missing or invalid API key: send 'Authorization: Bearer <key>'.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    return 401, body, {"WWW-Authenticate": "Bearer"}


def too_large(limit: int) -> tuple[int, dict, dict]:
    body = {
        "error": {
            "message": f"Request body larger than {limit} bytes.",
            "type": "invalid_request_error",
            "code": "request_too_large",
        }
    }
    return 413, body, {}


def bad_length() -> tuple[int, dict, dict]:
    body = {"error": {"message": "Bad Content-Length.", "type": "invalid_request_error", "code": "bad_request"}}
    return 400, body, {}


async def _answer(send, answer: tuple[int, dict, dict]) -> None:
    """An ASGI response from (status, JSON body, headers)."""
    status, body, headers = answer
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


class KeyGate:
    """ASGI middleware in front of the whole app. HTTP requests without a valid key: 401, their body unread. With
    one: a declared Content-Length over the limit is 413 unread; a body without one (chunked) is read here, up to
    the limit, and handed on. Lifespan events pass; any other kind (websocket) is closed: the ingress serves none."""

    def __init__(self, app, ring: KeyRing, max_body_bytes: int):
        self.app, self.ring, self.max_body_bytes = app, ring, max_body_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return await send({"type": "websocket.close", "code": 1008})  # policy violation
        headers = dict((k.lower(), v) for k, v in scope.get("headers") or [])
        if not self.ring.allows(headers.get(b"authorization", b"").decode("latin-1")):
            return await _answer(send, refusal())
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return await _answer(send, bad_length())
            if int(length) > self.max_body_bytes:
                return await _answer(send, too_large(self.max_body_bytes))
            return await self.app(scope, receive, send)
        if b"transfer-encoding" not in headers:  # no body
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                return await _answer(send, too_large(self.max_body_bytes))
            more = message.get("more_body", False)
        handed = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay():
            return handed.pop() if handed else await receive()

        return await self.app(scope, replay, send)


def secure(app, ring: KeyRing, max_body_bytes: int | None = None) -> None:
    """The ingress's FastAPI app (before it starts), behind KeyGate and without CORS: Ray Serve LLM 2.58 answers
    every origin with credentials (ray/llm/_internal/serve/core/ingress/ingress.py init, CORSMiddleware
    allow_origins ["*"], allow_credentials); the API takes bearer keys from programs, not cookies from browsers,
    so no cross-origin browser call is admitted. KeyGate goes first of the app's middleware, outside the rest."""
    if max_body_bytes is None:
        max_body_bytes = int(os.environ.get(MAX_BODY_ENV, DEFAULT_MAX_BODY_BYTES))
    app.user_middleware[:] = [m for m in app.user_middleware if getattr(m.cls, "__name__", "") != "CORSMiddleware"]
    app.add_middleware(KeyGate, ring=ring, max_body_bytes=max_body_bytes)


class GatedIngress:
    """Mixin for an ingress deployment class (before OpenAiIngress in its bases): Ray Serve hands the replica's
    ASGI app to `_set_asgi_app` (Ray 2.58 serve/_private/http_util.py ASGIAppReplicaWrapper, called from the
    wrapper's __init__ after the class's own, before the app's lifespan starts), which secures it first."""

    _gate_ring: KeyRing | None = None

    def _set_asgi_app(self, app) -> None:
        secure(app, type(self)._gate_ring or KeyRing())
        super()._set_asgi_app(app)


def key_checked(method: Callable, ring: KeyRing, request_type: type, respond: Callable) -> Callable:
    """`method` (an ingress endpoint) behind the key check. FastAPI injects the raw request into the
    method's own Request parameter or an extra keyword one; a refused request never reaches the
    method. `respond(status, body, headers)` builds the framework's response."""
    signature = inspect.signature(method)
    hints = typing.get_type_hints(method, include_extras=True)  # resolve string annotations here
    parameters = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
    # FastAPI injects the request into one parameter only: reuse the method's own if it has one.
    own = next((p.name for p in parameters if p.annotation is request_type), None)
    if own is None:
        parameters.append(inspect.Parameter(_REQUEST_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=request_type))

    @functools.wraps(method)
    async def checked(*args, **kwargs):
        request = kwargs[own] if own else kwargs.pop(_REQUEST_PARAM)
        if not ring.allows(request.headers.get("authorization")):
            return respond(*refusal())
        return await method(*args, **kwargs)

    checked.__signature__ = signature.replace(
        parameters=parameters, return_annotation=hints.get("return", signature.return_annotation)
    )
    del checked.__wrapped__  # FastAPI must read __signature__, not the original method's
    return checked
