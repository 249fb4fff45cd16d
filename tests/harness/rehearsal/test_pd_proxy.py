"""The plain-vLLM yardstick's proxy (rehearsal/pd_proxy.py) against stub engines on loopback: what prefill and decode
are sent, what the client gets back, the hops timed per request, and a prefill that answers without KV params."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from aiohttp import TCPConnector, web
from aiohttp.test_utils import TestClient, TestServer

from rehearsal import pd_proxy

PARAMS = {"do_remote_prefill": True, "remote_engine_id": "p0", "remote_block_ids": [[3, 4]], "remote_host": "h"}


def stub_engine(name: str, seen: list, kv_params: dict | None = PARAMS) -> web.Application:
    """An engine that records each body it gets and answers as vLLM does: a non-streamed JSON answer (with
    kv_transfer_params when asked for a remote decode), or an SSE stream of three chunks."""

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append((name, body))
        if not body.get("stream"):
            extra = {"kv_transfer_params": kv_params} if kv_params and "kv_transfer_params" in body else {}
            return web.json_response({"choices": [{"text": "x"}], **extra})
        response = web.StreamResponse()
        response.content_type = "text/event-stream"
        await response.prepare(request)
        for k in range(3):
            await asyncio.sleep(0.01)
            await response.write(f"data: {json.dumps({'from': name, 'k': k})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    app.router.add_post("/v1/chat/completions", answer)
    return app


async def _serve(app: web.Application) -> TestServer:
    server = TestServer(app)
    await server.start_server()
    return server


async def _proxy_run(mode: str, engines: dict[str, web.Application], body: dict, requests: int = 1):
    servers = {name: await _serve(app) for name, app in engines.items()}
    url = {name: str(s.make_url("")).rstrip("/") for name, s in servers.items()}
    prefill = [url[n] for n in engines if n.startswith("prefill")]
    decode = [url[n] for n in engines if not n.startswith("prefill")]
    client = TestClient(TestServer(pd_proxy.make_app(mode, prefill, decode)))
    await client.start_server()
    try:
        texts = []
        for _ in range(requests):
            answer = await client.post("/v1/chat/completions", json=body)
            texts.append((answer.status, await answer.text()))
        hops = await (await client.get("/timings?clear=1")).json()
        again = await (await client.get("/timings")).json()
        return texts, hops, again
    finally:
        await client.close()
        for server in servers.values():
            await server.close()


def test_pd_mode_asks_prefill_for_one_token_and_hands_its_params_to_decode():
    seen: list = []
    engines = {"prefill": stub_engine("prefill", seen), "decode": stub_engine("decode", seen)}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    texts, hops, again = asyncio.run(_proxy_run("pd", engines, body))
    (status, text), = texts  # fmt: skip
    assert status == 200 and text.count("data: ") == 4 and '"from": "decode"' in text
    (p_name, p_body), (d_name, d_body) = seen
    assert p_name == "prefill" and d_name == "decode"
    assert p_body["max_tokens"] == 1 and p_body["stream"] is False and "stream_options" not in p_body
    assert p_body["kv_transfer_params"] == pd_proxy.PREFILL_PARAMS
    assert d_body["kv_transfer_params"] == PARAMS and d_body["max_tokens"] == 64 and d_body["stream"] is True
    assert d_body["stream_options"] == {"include_usage": True}
    (hop,) = hops
    assert hop["status"] == 200 and hop["route"] == "/v1/chat/completions"
    order = [hop[k] for k in ("prefill_sent", "prefill_answered", "decode_sent", "decode_first_byte", "done")]
    assert order == sorted(order) and order[0] >= 0
    assert again == [], "timings?clear=1 forgets what it returned"


def test_a_prefill_answer_without_kv_params_is_a_502_that_says_why():
    seen: list = []
    engines = {"prefill": stub_engine("prefill", seen, kv_params=None), "decode": stub_engine("decode", seen)}
    texts, hops, _ = asyncio.run(_proxy_run("pd", engines, {"model": "m", "messages": [], "stream": True}))
    (status, text), = texts  # fmt: skip
    assert status == 502 and "kv_producer" in text
    assert [name for name, _ in seen] == ["prefill"], "decode is never asked"
    assert hops[0]["decode_sent"] is None and hops[0]["status"] == 502


def test_collocated_mode_sends_each_request_whole_to_the_next_engine():
    seen: list = []
    engines = {"engine-1": stub_engine("engine-1", seen), "engine-2": stub_engine("engine-2", seen)}
    body = {"model": "m", "messages": [], "max_tokens": 8, "stream": True}
    texts, hops, _ = asyncio.run(_proxy_run("collocated", engines, body, requests=3))
    assert [status for status, _ in texts] == [200, 200, 200]
    assert [name for name, _ in seen] == ["engine-1", "engine-2", "engine-1"]
    assert all("kv_transfer_params" not in b and b["max_tokens"] == 8 for _, b in seen)
    assert all(h["prefill_sent"] is None and h["decode_first_byte"] is not None for h in hops)


def test_a_mode_or_layout_that_cannot_work_is_refused():
    with pytest.raises(ValueError, match="pd or collocated"):
        pd_proxy.make_app("split", [], ["http://x"])
    with pytest.raises(ValueError, match="at least one prefill"):
        pd_proxy.make_app("pd", [], ["http://x"])


def test_the_proxy_itself_never_caps_the_requests_in_flight():
    """Every request reaches its engine at once, past aiohttp's default of 100 connections a session: a cap in the
    yardstick's proxy would queue requests there and read as the engines' queue."""
    in_flight = 120
    state = {"active": 0, "peak": 0}
    everyone = asyncio.Event()

    async def hold(request: web.Request) -> web.Response:
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        if state["active"] == in_flight:
            everyone.set()
        with contextlib.suppress(TimeoutError):  # a cap below in_flight: the held ones answer after 3 s
            await asyncio.wait_for(everyone.wait(), timeout=3)
        state["active"] -= 1
        return web.json_response({"choices": [{"text": "x"}]})

    engine = web.Application()
    engine.router.add_post("/v1/completions", hold)

    async def run() -> list[int]:
        server = await _serve(engine)
        proxy = pd_proxy.make_app("collocated", [], [str(server.make_url("")).rstrip("/")])
        client = TestClient(TestServer(proxy), connector=TCPConnector(limit=0))  # the test's own client: no cap
        await client.start_server()
        try:
            body = {"model": "m", "prompt": "hi", "max_tokens": 1}
            answers = await asyncio.gather(*(client.post("/v1/completions", json=body) for _ in range(in_flight)))
            return [a.status for a in answers]
        finally:
            await client.close()
            await server.close()

    statuses = asyncio.run(run())
    assert statuses == [200] * in_flight
    assert state["peak"] == in_flight, f"at most {state['peak']} of {in_flight} requests reached the engine at once"


def test_idle_connections_to_the_engines_end_before_vllms_server_ends_them():
    """vLLM 0.26's HTTP server drops an idle connection after VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s, envs.py); the proxy
    must drop it first, or a request sent on a connection the engine is closing fails. Seen from the engine: its
    end of the connection closes, with no engine-side timeout (aiohttp's server keeps one 75 s), within 5 s; and
    since aiohttp's client clears idle connections once a keep-alive period, the worst case, twice it, is within
    5 s too."""
    vllm_keep_alive_s = 5
    assert vllm_keep_alive_s > 2 * pd_proxy.UPSTREAM_KEEPALIVE_S
    transports = []

    async def answer(request: web.Request) -> web.Response:
        transports.append(request.transport)
        return web.json_response({"choices": [{"text": "x"}]})

    engine = web.Application()
    engine.router.add_post("/v1/completions", answer)

    async def idle_until_closed() -> float:
        server = await _serve(engine)
        proxy = pd_proxy.make_app("collocated", [], [str(server.make_url("")).rstrip("/")])
        client = TestClient(TestServer(proxy))
        await client.start_server()
        try:
            response = await client.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 1})
            assert response.status == 200
            answered = asyncio.get_running_loop().time()
            while not transports[0].is_closing() and asyncio.get_running_loop().time() - answered < vllm_keep_alive_s:
                await asyncio.sleep(0.05)
            return asyncio.get_running_loop().time() - answered
        finally:
            await client.close()
            await server.close()

    idle_s = asyncio.run(idle_until_closed())
    assert idle_s < vllm_keep_alive_s, f"the proxy kept an idle engine connection {idle_s:.1f} s"
