"""The API key check (ray_llm_eks/serve_ingress/api_keys.py) run through a real FastAPI app, routed the way
Ray Serve LLM's make_fastapi_ingress routes OpenAiIngress's methods: a request without a key or
with a wrong one is refused before the endpoint runs; the right key (old or new during a
rotation) is served. The same check through Ray's real OpenAiIngress, served by Ray Serve:
`make rehearse STACK=dev` (CI), whose smoke sends no key, a wrong key and the right one."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ray_llm_eks.serve_ingress.api_keys import KeyRing, key_checked


class ChatBody(BaseModel):
    model: str


class StandInIngress:
    """Endpoints shaped like OpenAiIngress's (`models(self)`, `chat(self, body, request)`); they
    record that they ran, so a refusal is seen to stop the request before the endpoint."""

    def __init__(self):
        self.calls: list[str] = []

    async def models(self) -> dict:
        self.calls.append("models")
        return {"data": [{"id": "m"}]}

    async def chat(self, body: ChatBody, request: Request) -> dict:
        self.calls.append(f"chat {body.model} {request.url.path}")
        return {"ok": True}


def _json(status, body, headers):
    return JSONResponse(status_code=status, content=body, headers=headers)


def _app(ring: KeyRing) -> tuple[FastAPI, StandInIngress]:
    """As Ray Serve LLM's make_fastapi_ingress does: a subclass whose routed methods are the checked
    ones, routes on the class's functions, then Ray Serve's own `serve.ingress`, which rewrites each
    route's signature to inject the replica's instance as `self`; here the instance is injected by
    overriding that dependency, as a replica would provide it."""
    from ray import serve
    from ray.serve._private.http_util import _walk_fastapi_routes

    checked = {name: key_checked(getattr(StandInIngress, name), ring, Request, _json) for name in ("models", "chat")}
    cls = type("Checked", (StandInIngress,), checked)
    app = FastAPI()
    app.get("/v1/models")(cls.models)
    app.post("/v1/chat/completions")(cls.chat)
    serve.ingress(app)(cls)
    ingress = cls()
    route = next(r for r, _, _ in _walk_fastapi_routes(app) if getattr(r, "path", "") == "/v1/models")
    app.dependency_overrides[route.endpoint.__signature__.parameters["self"].default.dependency] = lambda: ingress
    return app, ingress


def _call(app: FastAPI, method: str, path: str, key: str | None = None, scheme: str = "Bearer"):
    """One HTTP request through the app's ASGI interface: (status, JSON body, headers)."""
    headers = [(b"content-type", b"application/json")]
    if key is not None:
        headers.append((b"authorization", f"{scheme} {key}".encode()))
    body = json.dumps({"model": "m"}).encode() if method == "POST" else b""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []

    async def receive():
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    loop = asyncio.new_event_loop()  # not asyncio.run: it would unset the loop Pulumi's mocks use
    try:
        loop.run_until_complete(app(scope, receive, send))
    finally:
        loop.close()
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], json.loads(payload), dict(sent[0]["headers"])


@pytest.fixture
def keys_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text("sk-old-0123456789\nsk-new-9876543210\n")
    return path


def test_no_key_and_wrong_key_are_refused_before_the_endpoint(keys_file):
    app, ingress = _app(KeyRing(str(keys_file)))
    for key in (None, "sk-wrong", ""):
        status, body, headers = _call(app, "POST", "/v1/chat/completions", key)
        assert (status, body["error"]["code"]) == (401, "invalid_api_key")
        assert headers[b"www-authenticate"] == b"Bearer"
    status, _, _ = _call(app, "POST", "/v1/chat/completions", "sk-new-9876543210", scheme="Basic")
    assert status == 401
    status, _, _ = _call(app, "GET", "/v1/models")
    assert status == 401
    assert ingress.calls == []


def test_the_right_key_is_served(keys_file):
    app, ingress = _app(KeyRing(str(keys_file)))
    assert _call(app, "POST", "/v1/chat/completions", "sk-new-9876543210")[:2] == (200, {"ok": True})
    assert _call(app, "GET", "/v1/models", "sk-old-0123456789")[:2] == (200, {"data": [{"id": "m"}]})
    assert ingress.calls == ["chat m /v1/chat/completions", "models"]


def test_rotation_takes_effect_without_a_restart(keys_file):
    app, _ = _app(KeyRing(str(keys_file)))
    assert _call(app, "GET", "/v1/models", "sk-old-0123456789")[0] == 200
    keys_file.write_text("sk-new-9876543210\n")  # the old key removed from the Secret
    stat = keys_file.stat()
    os.utime(keys_file, (stat.st_atime, stat.st_mtime + 5))  # as kubelet's refresh would
    assert _call(app, "GET", "/v1/models", "sk-old-0123456789")[0] == 401
    assert _call(app, "GET", "/v1/models", "sk-new-9876543210")[0] == 200


def test_missing_or_empty_key_file_refuses_everything(tmp_path):
    missing = KeyRing(str(tmp_path / "absent"))
    assert not missing.allows("Bearer anything")
    (tmp_path / "empty").write_text("\n\n")
    app, _ = _app(KeyRing(str(tmp_path / "empty")))
    assert _call(app, "GET", "/v1/models", "")[0] == 401
    assert _call(app, "GET", "/v1/models", "x")[0] == 401


# ---- the wiring: what the RayService gets (ray_llm_eks/domain/serving/api_keys.py)


def test_dev_rayservice_answers_through_the_key_checked_ingress(dev):
    import yaml
    from ray.serve.schema import ServeDeploySchema

    from ray_llm_eks.domain.serving import api_keys

    spec = dev.one("kubernetes:ray.io/v1:RayService").inputs["spec"]
    document = yaml.safe_load(spec["serveConfigV2"])
    ServeDeploySchema.model_validate(document)  # Ray's own schema still accepts it
    app = document["applications"][0]
    assert app["args"]["ingress_cls_config"] == {"ingress_cls": "api_key_ingress:ApiKeyIngress"}
    assert app["runtime_env"]["env_vars"]["PYTHONPATH"] == "/opt/ray-llm-eks/python:${PYTHONPATH}"
    hook = app["runtime_env"]["env_vars"]["__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"]
    assert hook == "worker_setup.configure_logging_first"  # a module the ConfigMap below carries
    cluster = spec["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        mounts = {m["mountPath"]: m for m in group["template"]["spec"]["containers"][0]["volumeMounts"]}
        assert mounts[api_keys.KEYS_DIR]["readOnly"] and mounts[api_keys.MODULE_DIR]["readOnly"]
    shipped = dev.one("kubernetes:core/v1:ConfigMap", "llm-api-key-ingress").inputs["data"]
    assert shipped == api_keys.ingress_sources() and set(shipped) == {
        "api_keys.py",
        "api_key_ingress.py",
        "worker_setup.py",
    }
    secret = dev.one("kubernetes:core/v1:Secret", "llm-api-keys")
    assert secret.inputs["stringData"] == "[secret]"
    service = dev.one("kubernetes:ray.io/v1:RayService")
    assert dev.depends_on(service.urn, secret.urn)


def test_key_file_from_the_apikeys_setting():
    from ray_llm_eks.domain.core.errors import ConfigError
    from ray_llm_eks.domain.serving.api_keys import key_file_content

    assert key_file_content("sk-aaaaaaaaaaaaaaaa, sk-bbbbbbbbbbbbbbbb") == "sk-aaaaaaaaaaaaaaaa\nsk-bbbbbbbbbbbbbbbb\n"
    assert key_file_content(None) == ""  # no keys: every request refused
    with pytest.raises(ConfigError) as error:
        key_file_content("sk-aaaaaaaaaaaaaaaa short")
    # The message names the rule, never a key: the value shown is the placeholder.
    assert (
        str(error.value) == "invalid config ray-llm-eks:apiKeys = '[secret]': "
        "1 key(s) shorter than 16 characters (e.g. openssl rand -hex 24)"
    )


def test_a_serve_file_with_its_own_ingress_is_refused():
    from ray_llm_eks.domain.core.errors import ConfigError
    from ray_llm_eks.domain.serving.api_keys import check_no_own_ingress

    document = {"applications": [{"name": "llm", "args": {"ingress_cls_config": {"ingress_cls": "x:Y"}}}]}
    with pytest.raises(
        ConfigError, match=r"mine\.yaml: invalid config args\.ingress_cls_config: left out: the stack sets it"
    ):
        check_no_own_ingress(document, "ray_llm_eks/serve_configs/mine.yaml")
