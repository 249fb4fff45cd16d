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
    assert app["runtime_env"]["env_vars"]["RAY_LLM_EKS_MAX_REQUEST_BYTES"] == "8388608"  # maxRequestBytes' default
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
        "ray_start.py",  # the head's start with a GCS store (ray_llm_eks/domain/cluster/gcs_ft.py head_start)
        "prefill_peers.py",  # the PD decode servers' prefill guard
        "prefill_guard.py",
        "stream_chunks.py",  # every LLM server's first interval at once
        "first_chunk.py",
        "local_prefill.py",  # selective PD's decode server, shipped whatever the app
        "selective_pd.py",
    }
    secret = dev.one("kubernetes:core/v1:Secret", "llm-api-keys")
    assert secret.inputs["stringData"] == "[secret]"
    service = dev.one("kubernetes:ray.io/v1:RayService")
    assert dev.depends_on(service.urn, secret.urn)


def test_key_file_from_the_apikeys_setting():
    from ray_llm_eks.domain.core.errors import ConfigError
    from ray_llm_eks.domain.serving.api_keys import key_file_content

    assert key_file_content("sk-aaaaaaaaaaaaaaaa, sk-bbbbbbbbbbbbbbbb") == "sk-aaaaaaaaaaaaaaaa\nsk-bbbbbbbbbbbbbbbb\n"
    assert (
        key_file_content("sk-aaaaaaaaaaaaaaaa,,\n sk-bbbbbbbbbbbbbbbb,") == "sk-aaaaaaaaaaaaaaaa\nsk-bbbbbbbbbbbbbbbb\n"
    )
    assert key_file_content("dGhpcyBpcyBhIGtleSBvayE=") == "dGhpcyBpcyBhIGtleSBvayE=\n"  # base64 keeps its padding
    with pytest.raises(ConfigError) as error:
        key_file_content("sk-aaaaaaaaaaaaaaaa short")
    # The message names the rule, never a key: the value shown is the placeholder.
    assert str(error.value) == (
        "invalid config ray-llm-eks:apiKeys = '[secret]': 1 key(s) shorter than 16 characters (keys separated by "
        "commas, spaces or newlines, each at least 16 characters of letters, digits and - . _ ~ + / (= at the end), "
        "e.g. openssl rand -hex 24)"
    )


@pytest.mark.parametrize("value", [",", "  \n ", ",,, ,", None])
def test_apikeys_without_a_key_never_make_an_empty_key_file(value):
    """An empty file would refuse every request, silently: the value is refused in one line naming the key."""
    from ray_llm_eks.domain.core.errors import ConfigError
    from ray_llm_eks.domain.serving.api_keys import key_file_content

    with pytest.raises(ConfigError, match=r"^invalid config ray-llm-eks:apiKeys = '\[secret\]': at least one key"):
        key_file_content(value)


@pytest.mark.parametrize(
    ("value", "found"), [("sk-aaaaaaaaaaaaaaaa;sk-bbbbbbbbbbbbbbbb", "';'"), ("k:" + "a" * 20, "':'")]
)
def test_a_character_no_key_holds_is_refused_not_guessed_a_separator(value, found):
    from ray_llm_eks.domain.core.errors import ConfigError
    from ray_llm_eks.domain.serving.api_keys import key_file_content

    with pytest.raises(ConfigError) as error:
        key_file_content(value)
    assert str(error.value).endswith(f"found {found}") and "sk-aaaa" not in str(error.value)


def test_a_serve_file_with_its_own_ingress_is_refused():
    from ray_llm_eks.domain.core.errors import ConfigError
    from ray_llm_eks.domain.serving.api_keys import check_no_own_ingress
    from ray_llm_eks.domain.serving.serve_app import COLLOCATED_IMPORT, parse_document

    args = {"llm_configs": [{}], "ingress_cls_config": {"ingress_cls": "x:Y"}}
    document = parse_document({"applications": [{"name": "llm", "import_path": COLLOCATED_IMPORT, "args": args}]}, "t")
    with pytest.raises(
        ConfigError, match=r"mine\.yaml: invalid config args\.ingress_cls_config: left out: the stack sets it"
    ):
        check_no_own_ingress(document, "ray_llm_eks/serve_configs/mine.yaml")


# ---- the gate in front of the whole app (KeyGate, secure, GatedIngress)

FIFTY_MB = 50 * 2**20
KEY = "sk-new-9876543210"


def _gated(keys_file, limit: int = 2**20) -> tuple[FastAPI, StandInIngress]:
    """The stand-in app as Ray Serve LLM 2.58 builds its own (ingress.py init: CORS for every origin with
    credentials), secured the way GatedIngress secures it in the replica."""
    from fastapi.middleware.cors import CORSMiddleware

    from ray_llm_eks.serve_ingress.api_keys import secure

    app, ingress = _app(KeyRing(str(keys_file)))
    app.add_middleware(
        CORSMiddleware, allow_origins=["*"], allow_credentials=True, allow_methods=["*"], allow_headers=["*"]
    )
    secure(app, KeyRing(str(keys_file)), limit)
    return app, ingress


def _asgi(app, method: str, path: str, headers: list[tuple[bytes, bytes]], chunks: list[bytes]):
    """One request through the app's ASGI interface, its body in `chunks`: (status, headers, body, receive calls)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    pending, sent, calls = list(chunks), [], [0]

    async def receive():
        calls[0] += 1
        if not pending:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": pending.pop(0), "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(app(scope, receive, send))
    finally:
        loop.close()
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:]), calls[0]


def test_a_keyless_50_mb_body_is_refused_before_any_of_it_is_read(keys_file):
    app, ingress = _gated(keys_file)
    chunks = [b"x" * 2**20] * 50  # what the client would send, if asked
    headers = [(b"content-type", b"application/json"), (b"content-length", str(FIFTY_MB).encode())]
    status, answer, body, receive_calls = _asgi(app, "POST", "/v1/chat/completions", headers, chunks)
    assert (status, json.loads(body)["error"]["code"]) == (401, "invalid_api_key")
    assert answer[b"www-authenticate"] == b"Bearer"
    assert receive_calls == 0 and ingress.calls == []


def test_over_http_the_401_comes_back_while_the_50_mb_are_still_unsent(keys_file):
    """A real server (uvicorn, as Ray Serve's proxy runs) and a real socket: the client sends the headers of a
    50 MB request and none of its body; the answer arrives anyway, so nothing waited for the body."""
    import socket
    import threading
    import time

    import uvicorn

    app, ingress = _gated(keys_file)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            client.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {FIFTY_MB}\r\n\r\n".encode()
            )
            answer = client.recv(4096)  # within the 5 s timeout, with 0 of 52,428,800 body bytes sent
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:80]
        assert b"invalid_api_key" in answer and ingress.calls == []
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_a_keyless_bad_body_gets_401_not_422_naming_the_fields(keys_file):
    app, _ = _gated(keys_file)
    status, _, body, _ = _asgi(app, "POST", "/v1/chat/completions", [(b"content-length", b"7")], [b"{nope]}"])
    assert status == 401 and b"model" not in body
    with_key = [
        (b"content-length", b"2"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {KEY}".encode()),
    ]
    assert _asgi(app, "POST", "/v1/chat/completions", with_key, [b"{}"])[0] == 422  # past the gate: FastAPI's own


def test_docs_and_the_openapi_schema_need_a_key(keys_file):
    app, _ = _gated(keys_file)
    for path in ("/docs", "/openapi.json", "/redoc", "/anything"):
        assert _asgi(app, "GET", path, [], [])[0] == 401, path
    assert _asgi(app, "GET", "/openapi.json", [(b"authorization", f"Bearer {KEY}".encode())], [])[0] == 200


def test_no_cross_origin_browser_call_is_admitted(keys_file):
    """Ray's CORS answered every origin, with credentials; the secured app sends no CORS header at all."""
    app, _ = _gated(keys_file)
    origin = [(b"origin", b"https://evil.example"), (b"authorization", f"Bearer {KEY}".encode())]
    status, headers, _, _ = _asgi(app, "GET", "/v1/models", origin, [])
    assert status == 200 and not [h for h in headers if h.startswith(b"access-control-")]
    preflight = [(b"origin", b"https://evil.example"), (b"access-control-request-method", b"POST")]
    status, headers, _, _ = _asgi(app, "OPTIONS", "/v1/chat/completions", preflight, [])
    assert status == 401 and not [h for h in headers if h.startswith(b"access-control-")]


def test_bodies_over_the_limit_are_413_declared_or_chunked(keys_file):
    app, ingress = _gated(keys_file, limit=1000)
    key = (b"authorization", f"Bearer {KEY}".encode())
    declared = [key, (b"content-length", b"1001")]
    status, _, body, calls = _asgi(app, "POST", "/v1/chat/completions", declared, [b"x" * 1001])
    assert (status, json.loads(body)["error"]["code"], calls) == (413, "request_too_large", 0)
    chunked = [key, (b"transfer-encoding", b"chunked"), (b"content-type", b"application/json")]
    assert _asgi(app, "POST", "/v1/chat/completions", chunked, [b"x" * 600, b"x" * 600])[0] == 413
    small = _asgi(app, "POST", "/v1/chat/completions", chunked, [b'{"model":', b' "m"}'])
    assert small[0] == 200 and ingress.calls == ["chat m /v1/chat/completions"]  # a chunked body handed on whole
    assert _asgi(app, "POST", "/v1/chat/completions", [key, (b"content-length", b"x1")], [b""])[0] == 400


# Ray 2.58's serve.ingress wrapper has an async __del__ (ray/serve/api.py, ASGIIngressWrapper) that a replica awaits
# when it stops; here the garbage collector calls it and drops the coroutine, which says nothing about the gate.
@pytest.mark.filterwarnings("ignore:coroutine .*ASGIIngressWrapper.__del__' was never awaited:RuntimeWarning")
def test_ray_serves_replica_wrapper_hands_its_app_to_the_gate(keys_file):
    """GatedIngress through Ray Serve's own serve.ingress wrapper (ray.serve.api, http_util
    ASGIAppReplicaWrapper): the replica's app is the secured one, whatever the class's routes."""
    from fastapi.middleware.cors import CORSMiddleware
    from ray import serve

    from ray_llm_eks.serve_ingress.api_keys import GatedIngress

    app = FastAPI()
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_credentials=True)

    class Ingress(GatedIngress):
        _gate_ring = KeyRing(str(keys_file))

        @app.get("/v1/models")
        async def models(self) -> dict:
            return {"data": []}

    wrapper = serve.ingress(app)(Ingress)
    loop = asyncio.new_event_loop()
    try:
        replica = wrapper.__new__(wrapper)
        loop.run_until_complete(replica.__init__())  # what a replica does (its __init__ is async)
    finally:
        loop.close()
    names = [m.cls.__name__ for m in replica.app.user_middleware]
    assert names == ["KeyGate"]  # the gate, outermost; Ray's CORS gone
    assert _asgi(replica.app, "GET", "/v1/models", [], [])[0] == 401


def test_max_request_bytes_out_of_range_is_one_line():
    from tests.conftest import settings_error

    error = settings_error({"ray-llm-eks:maxRequestBytes": 100})
    assert "maxRequestBytes = 100: a number of bytes from 65536 to 1073741824" in str(error)
