"""A minimal OpenAI-compatible proxy in front of plain `vllm serve` engines: the yardstick the project's PD app is
measured against on the same GPU (rehearsal/plain_vllm.py starts the engines).

`pd` mode is the pattern of vLLM's own NIXL integration tests (tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py) and of Ray Serve LLM 2.58's default P/D protocol (llm/_internal/serve/engines/vllm/
kv_transfer/base.py DefaultPDProtocolMixin): prefill gets the request clamped to one non-streamed token with
kv_transfer_params asking for a remote decode; decode gets the original request with the kv_transfer_params
prefill returned, and its answer (streamed or not) goes back as it comes. `collocated` mode sends each request whole
to the next engine in turn (round robin), as two collocated replicas would be served.

Each request's hops are timed (seconds since the proxy received it) and kept for GET /timings: when prefill was
asked and answered, and when decode's first and last bytes came. Which hop grows with the requests in flight says
where they queue. No key check, no retries: a measurement tool, not a server to deploy.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from dataclasses import asdict, dataclass, field

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

ROUTES = ("/v1/chat/completions", "/v1/completions")
# Ray Serve LLM 2.58 base_prefill_kv_transfer_params(); vLLM's toy proxy sends the same four keys and two more,
# remote_host and remote_port, as None (the prefill engine fills them in its answer).
SESSION = web.AppKey("session", ClientSession)
# Idle connections to an engine are dropped before the engine does: vLLM's HTTP server closes them after 5 s
# (vLLM 0.26 envs.py VLLM_HTTP_TIMEOUT_KEEP_ALIVE), aiohttp 3.14 keeps them 15 s, and a request sent on one the engine
# is closing fails with "Server disconnected". aiohttp clears idle connections once a keep-alive period (connector.py
# `_cleanup`), so one can stay idle up to twice this: 4 s.
UPSTREAM_KEEPALIVE_S = 2.0
PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


@dataclass
class Hops:
    """One request's way through the proxy, in seconds since it arrived (None: not reached)."""

    route: str
    engine: str  # the engine that decoded (or served it whole)
    prefill_sent: float | None = None
    prefill_answered: float | None = None
    decode_sent: float | None = None
    decode_first_byte: float | None = None
    done: float | None = None
    status: int = 0
    error: str = ""
    arrived_at: float = field(default=0.0, repr=False)  # time.monotonic() when it arrived

    def mark(self, name: str) -> None:
        setattr(self, name, round(time.monotonic() - self.arrived_at, 6))


def prefill_request(body: dict) -> dict:
    """The request as prefill gets it: one token, not streamed, asking for a remote decode."""
    prefill = copy.deepcopy(body)
    prefill["kv_transfer_params"] = dict(PREFILL_PARAMS)
    prefill["max_tokens"] = 1
    if "max_completion_tokens" in prefill:
        prefill["max_completion_tokens"] = 1
    prefill["stream"] = False
    prefill.pop("stream_options", None)
    return prefill


def decode_request(body: dict, prefill_answer: dict) -> dict:
    """The request as decode gets it: the original, with the kv_transfer_params prefill answered with."""
    params = prefill_answer.get("kv_transfer_params")
    if not params:
        raise ValueError("prefill answered without kv_transfer_params: is its kv_transfer_config a kv_producer's?")
    return {**copy.deepcopy(body), "kv_transfer_params": params}


def make_app(mode: str, prefill: list[str], decode: list[str], timeout_s: float = 600.0) -> web.Application:
    """The proxy: `mode` pd (prefill URLs, then decode URLs) or collocated (`decode` lists the engines)."""
    if mode not in ("pd", "collocated"):
        raise ValueError(f"mode {mode!r}: pd or collocated")
    if mode == "pd" and not prefill:
        raise ValueError("pd mode needs at least one prefill engine")
    turns = {"prefill": itertools.cycle(prefill or [""]), "decode": itertools.cycle(decode)}
    hops: list[Hops] = []
    app = web.Application(client_max_size=64 * 2**20)

    async def on_startup(app: web.Application) -> None:
        # No cap on connections (aiohttp's default is 100; a request holds one at a time): a cap would queue
        # requests in this proxy, before the engines, beyond that many in flight.
        connector = TCPConnector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_S)
        app[SESSION] = ClientSession(connector=connector, timeout=ClientTimeout(total=timeout_s))

    async def on_cleanup(app: web.Application) -> None:
        await app[SESSION].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        body = await request.json()
        engine = next(turns["decode"])
        hop = Hops(route=request.path, engine=engine, arrived_at=arrived)
        hops.append(hop)
        session = request.app[SESSION]
        if mode == "pd":
            hop.mark("prefill_sent")
            async with session.post(next(turns["prefill"]) + request.path, json=prefill_request(body)) as answer:
                text = await answer.text()
                hop.mark("prefill_answered")
                if answer.status != 200:
                    hop.status, hop.error = answer.status, f"prefill: {text[:300]}"
                    return web.Response(status=answer.status, text=text, content_type="application/json")
            try:
                body = decode_request(body, _json(text))
            except ValueError as exc:
                hop.status, hop.error = 502, str(exc)
                return web.json_response({"error": {"message": str(exc), "code": 502}}, status=502)
        hop.mark("decode_sent")
        async with session.post(engine + request.path, json=body) as answer:
            response = web.StreamResponse(status=answer.status)
            response.content_type = answer.content_type
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                if hop.decode_first_byte is None:
                    hop.mark("decode_first_byte")
                await response.write(chunk)
            hop.status = answer.status
        hop.mark("done")
        await response.write_eof()
        return response

    async def models(request: web.Request) -> web.Response:
        async with request.app[SESSION].get(decode[0] + "/v1/models") as answer:
            return web.Response(status=answer.status, text=await answer.text(), content_type="application/json")

    async def timings(request: web.Request) -> web.Response:
        rows = [{k: v for k, v in asdict(h).items() if k != "arrived_at"} for h in hops]
        if request.query.get("clear"):
            hops.clear()
        return web.json_response(rows)

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    for route in ROUTES:
        app.router.add_post(route, relay)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/timings", timings)
    app.router.add_get("/health", health)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def _json(text: str) -> dict:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"prefill's answer is not JSON: {text[:200]}") from exc
