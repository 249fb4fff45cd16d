"""What smoke, verify and the rehearsal share: a client with timeouts everywhere, one timed streamed request,
and the Ray metrics that show which Serve deployments handled requests."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import httpx2
import openai

DEFAULT_TIMEOUT = 30.0  # seconds: connect, and the longest gap between two bytes of a response (a stall)
DEFAULT_DEADLINE = 120.0  # seconds: one whole request, however it trickles
# Chunks a stream may send beyond max_tokens (the role's first chunk, the finish and usage chunks, a reasoning
# model's think tags): more is a server that ignores max_tokens, and reading on would hold it all in memory.
STREAM_SLACK_CHUNKS = 16


class StreamOverrun(RuntimeError):
    """A stream went on past max_tokens."""


class BadUrl(ValueError):
    """An endpoint URL the client cannot use: one line saying what it needs."""


def check_url(url: str) -> str:
    """`url` if it names an HTTP endpoint: a scheme and a host (`localhost:8000` alone has neither to urllib)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BadUrl(f"URL={url}: an http:// or https:// URL with a host, e.g. http://localhost:8000")
    return url


def api_base(url: str) -> str:
    """`http://host:8000` or `http://host:8000/v1` -> the OpenAI base URL (`.../v1`)."""
    url = check_url(url).rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


def client(url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> openai.AsyncOpenAI:
    # max_retries=0: a failure is reported, never hidden by a retry. The placeholder key is what an
    # endpoint without keys ignores (the openai package refuses an empty one).
    return openai.AsyncOpenAI(base_url=api_base(url), api_key=api_key or "none", timeout=timeout, max_retries=0)


@dataclass
class RequestResult:
    ok: bool
    error: str = ""
    ttft: float | None = None  # seconds to the first content
    itls: list[float] = field(default_factory=list)  # gaps between content chunks after the first
    output_tokens: int = 0
    prompt_tokens: int = 0
    text: str = ""
    finish_reason: str | None = None
    latency: float = 0.0


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "deadline exceeded"
    if isinstance(exc, openai.APITimeoutError):
        return "timed out (stalled)"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {str(exc.message)[:200]}"
    if isinstance(exc, StreamOverrun):
        return str(exc)
    return f"{type(exc).__name__}: {str(exc)[:200]}"


async def stream_chat(
    api: openai.AsyncOpenAI,
    model: str,
    messages: list[dict],
    max_tokens: int,
    deadline: float = DEFAULT_DEADLINE,
    extra_body: dict | None = None,
) -> RequestResult:
    """One streamed chat completion, timed. Never raises: errors come back in the result."""
    result = RequestResult(ok=False)
    start = time.perf_counter()
    last = None

    async def consume():
        nonlocal last
        stream = await api.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=extra_body or None,
        )
        parts = []
        chunks = 0
        async for chunk in stream:
            chunks += 1
            if chunks > max_tokens + STREAM_SLACK_CHUNKS:
                await stream.close()
                raise StreamOverrun(f"the stream went on past {chunks - 1} chunks for max_tokens {max_tokens}")
            if chunk.usage is not None:
                result.output_tokens = chunk.usage.completion_tokens or 0
                result.prompt_tokens = chunk.usage.prompt_tokens or 0
            for choice in chunk.choices:
                delta = choice.delta
                piece = (delta.content or "") + (getattr(delta, "reasoning_content", None) or "")
                if piece:
                    now = time.perf_counter()
                    if last is None:
                        result.ttft = now - start
                    else:
                        result.itls.append(now - last)
                    last = now
                    parts.append(piece)
                if choice.finish_reason:
                    result.finish_reason = choice.finish_reason
        result.text = "".join(parts)

    try:
        await asyncio.wait_for(consume(), deadline)
        if result.finish_reason is None:
            result.error = "stream ended without a finish_reason"
        elif result.output_tokens == 0 and not result.text:
            result.error = "no output tokens"
        else:
            result.ok = True
    except Exception as exc:  # every failure is a result: bench counts them, smoke reports them
        result.error = _error_text(exc)
    result.latency = time.perf_counter() - start
    return result


async def http_status(url: str, api_key: str | None, body: dict | None = None, timeout: float = DEFAULT_TIMEOUT) -> int:
    """The HTTP status of one plain request (GET, or POST with a JSON body), with `Authorization: Bearer <key>`
    or none at all (the openai client always sends one). Only the status is read, never the body; a caller's
    deadline (asyncio.wait_for) cancels it however slowly the server answers. httpx2: the openai client's own
    HTTP library (openai 3.57 imports it)."""
    headers = {"Content-Type": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    async with httpx2.AsyncClient(timeout=timeout) as client:
        method = "POST" if body is not None else "GET"
        async with client.stream(method, url, headers=headers, json=body) as response:
            return response.status_code


# Ray Serve's per-deployment request counter (Ray metrics endpoint, Prometheus text).
_COUNTER = re.compile(r"^ray_serve_deployment_request_counter(?:_total)?\{([^}]*)\}\s+([0-9.eE+-]+)", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def request_counters(metrics_text: str) -> list[tuple[dict[str, str], float]]:
    """Each series of Serve's request counter: its labels (deployment, replica, application, route), its value."""
    return [(dict(_LABEL.findall(labels)), float(value)) for labels, value in _COUNTER.findall(metrics_text)]


def metrics_urls(metrics_url: str) -> list[str]:
    """One Prometheus endpoint, or several comma-separated (a Ray cluster of several nodes: each node exports
    the replicas it runs)."""
    return [url for url in metrics_url.split(",") if url]


def deployment_requests(metrics_url: str, timeout: float = 10.0) -> dict[str, float]:
    """deployment name -> requests it handled so far, summed over replicas, routes and endpoints."""
    counts: dict[str, float] = {}
    for url in metrics_urls(metrics_url):
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
        for labels, value in request_counters(text):
            name = labels.get("deployment", "")
            counts[name] = counts.get(name, 0.0) + value
    return counts
