"""The key gate in front of Ray Serve LLM's ingress (ray_llm_eks/serve_ingress/api_keys.py KeyGate), on the real
replica: a keyless 50 MB request is answered 401 while its body is still unsent, /docs and /openapi.json need a
key, no cross-origin browser call is admitted, and a body over the limit is 413 unread. Raw HTTP over a socket:
a client library would send the body first."""

from __future__ import annotations

import socket
import urllib.parse

from ray_llm_eks.domain.serving import api_keys
from rehearsal.checks import Check
from rehearsal.context import Context, RehearsalFailed, say

FIFTY_MB = 50 * 2**20
ANSWER_WITHIN_SECONDS = 20.0  # the first request to a replica on 2 busy cores


def exchange(url: str, head: str) -> tuple[int, dict[str, str]]:
    """Send `head` (request line and headers, no body) and read the answer's status and headers."""
    parsed = urllib.parse.urlsplit(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=ANSWER_WITHIN_SECONDS) as client:
        client.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    if not lines or len(lines[0].split()) < 2:
        raise RehearsalFailed(f"gate: no HTTP answer to {head.splitlines()[0]!r}")
    headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    return int(lines[0].split()[1]), {k.strip().lower(): v.strip() for k, v in headers.items()}


def run_gate(ctx: Context) -> None:
    key = f"Authorization: Bearer {ctx.api_key}\n"
    host = "Host: rehearsal\n"
    post = "POST /v1/chat/completions HTTP/1.1\n" + host + "Content-Type: application/json\n"
    limit = int(ctx.document["applications"][0]["runtime_env"]["env_vars"][api_keys.MAX_BODY_ENV])
    expected = [
        ("a keyless 50 MB body, unsent", post + f"Content-Length: {FIFTY_MB}\n", 401),
        ("/docs without a key", "GET /docs HTTP/1.1\n" + host, 401),
        ("/openapi.json without a key", "GET /openapi.json HTTP/1.1\n" + host, 401),
        ("/openapi.json with the key", "GET /openapi.json HTTP/1.1\n" + host + key, 200),
        ("a body over the limit, unsent", post + key + f"Content-Length: {limit + 1}\n", 413),
    ]
    for what, head, status in expected:
        got, _ = exchange(ctx.url, head)
        if got != status:
            raise RehearsalFailed(f"gate: {what}: HTTP {got}, expected {status}")
        say(f"  gate: {what}: HTTP {got}")
    origin = "Origin: https://elsewhere.example\n"
    _, headers = exchange(ctx.url, "GET /v1/models HTTP/1.1\n" + host + key + origin)
    if any(name.startswith("access-control-") for name in headers):
        raise RehearsalFailed(f"gate: a cross-origin call got CORS headers: {sorted(headers)}")
    say("  gate: a cross-origin call with the key: no CORS header")


GATE = Check("gate", run_gate, when=lambda ctx: ctx.api_key is not None)
