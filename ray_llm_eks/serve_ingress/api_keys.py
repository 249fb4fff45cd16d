"""The API key check of the serving endpoint, free of Ray so the project's tests run it as it runs
in the pods. Shipped into every Ray pod with api_key_ingress.py (a ConfigMap, see
ray_llm_eks/domain/serving/api_keys.py).

Keys live in a file mounted from a Kubernetes Secret, one per line. The file is read again when it
changes (kubelet refreshes a mounted Secret within about a minute), so rotating is: add the new
key, move the clients, remove the old key; no pod restarts. An empty or missing file refuses all
requests (fails closed)."""

from __future__ import annotations

import functools
import hmac
import inspect
import os
import typing
from collections.abc import Callable

KEYS_FILE_ENV = "RAY_LLM_EKS_API_KEYS_FILE"
DEFAULT_KEYS_FILE = "/etc/ray-llm-eks/api-keys/keys"
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
