"""Prove an OpenAI-compatible endpoint serves: with a key, that it refuses no key and a wrong one and
serves the right one; list models, one chat completion, one streamed; and, for a prefill/decode app,
evidence from Ray's metrics that both the prefill and the decode deployment handled the requests."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field

from llmclient import core, metrics
from measure import kv_proof

PROMPT = [{"role": "user", "content": "Say hello in one short sentence."}]
METRICS_WAIT = 30.0  # seconds: Ray's metrics agent publishes every few seconds (10 s by default)


class SmokeError(RuntimeError):
    pass


@dataclass
class SmokeResult:
    model: str
    models: list[str]
    answer: str
    streamed: str
    ttft: float | None
    pd_evidence: dict[str, float] = field(default_factory=dict)  # deployment -> requests during smoke
    lines: list[str] = field(default_factory=list)


def _kv(metrics_url: str) -> kv_proof.KvCounters:
    return kv_proof.counters(metrics.scrape(core.metrics_urls(metrics_url), kv_proof.SERIES))


async def _kv_moved(metrics_url: str, before: kv_proof.KvCounters, requests: int) -> str:
    """Both sides serving is not enough: every request's KV must have moved over NIXL (vLLM answers a PD
    request whose KV never arrived: recomputed, or on a hybrid model from blocks never written)."""
    end = time.monotonic() + METRICS_WAIT
    while True:
        after = _kv(metrics_url)
        moved = after.transfers - before.transfers
        if moved >= requests or time.monotonic() > end:
            break
        await asyncio.sleep(1.0)
    failed = after.failed_transfers - before.failed_transfers
    if failed > 0 or moved < requests:
        raise SmokeError(
            f"the KV did not move for every request: {moved:g} NIXL transfer(s) for {requests} requests, "
            f"{failed:g} failed (make verify tells more)"
        )
    return f"KV moved over NIXL: {moved:g} transfer(s) for {requests} requests, none failed"


def _pd_roles(deltas: dict[str, float]) -> dict[str, float]:
    roles: dict[str, float] = {}
    for name, count in deltas.items():
        for role in ("Prefill", "Decode"):
            if role.lower() in name.lower():
                roles[role.lower()] = roles.get(role.lower(), 0.0) + count
    return roles


async def key_check(url: str, api_key: str, timeout: float = core.DEFAULT_TIMEOUT) -> str:
    """The endpoint's key check: no key and a wrong key are refused (401), the right key is served (200), on
    the model list and on a chat completion. Returns the line to print; SmokeError otherwise."""
    models, chat = f"{core.api_base(url)}/models", f"{core.api_base(url)}/chat/completions"
    wrong = f"wrong-{secrets.token_hex(12)}"
    body = {"model": "any", "messages": PROMPT, "max_tokens": 1}
    cases = {
        "no key": (models, None, None, 401),
        "wrong key": (models, wrong, None, 401),
        "no key, chat": (chat, None, body, 401),
        "wrong key, chat": (chat, wrong, body, 401),
        "right key": (models, api_key, None, 200),
    }
    seen = {}
    for case, (target, key, payload, _) in cases.items():
        try:
            seen[case] = await asyncio.to_thread(core.http_status, target, key, payload, timeout)
        except OSError as exc:
            raise SmokeError(f"key check, {case}: {core._error_text(exc)}") from exc
    line = ", ".join(f"{case} -> {status}" for case, status in seen.items())
    if wrong_answers := [f"{case} -> HTTP {seen[case]}, expected {want}" for case, (*_, want) in cases.items()
                         if seen[case] != want]:  # fmt: skip
        raise SmokeError(f"API key check: {'; '.join(wrong_answers)} ({line})")
    return f"API key: {line}"


async def run(
    url: str,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = core.DEFAULT_TIMEOUT,
    deadline: float = core.DEFAULT_DEADLINE,
    max_tokens: int = 32,
    metrics_url: str | None = None,
    expect_pd: bool = False,
    extra_body: dict | None = None,
) -> SmokeResult:
    async with core.client(url, api_key, timeout) as api:
        out: list[str] = []
        if api_key:
            out.append(await key_check(url, api_key, timeout))
        before = core.deployment_requests(metrics_url) if metrics_url else {}
        kv_before = _kv(metrics_url) if metrics_url and expect_pd else None
        try:
            listed = await asyncio.wait_for(api.models.list(), deadline)
        except Exception as exc:
            raise SmokeError(f"list models at {core.api_base(url)}: {core._error_text(exc)}") from exc
        models = [m.id for m in listed.data]
        if not models:
            raise SmokeError("the endpoint lists no model")
        model = model or models[0]
        if model not in models:
            raise SmokeError(f"model {model!r} not served; served: {models}")
        out.append(f"models: {models}")

        try:
            reply = await asyncio.wait_for(
                api.chat.completions.create(
                    model=model, messages=PROMPT, max_tokens=max_tokens, extra_body=extra_body or None
                ),
                deadline,
            )
        except Exception as exc:
            raise SmokeError(f"chat completion: {core._error_text(exc)}") from exc
        if not reply.choices:
            raise SmokeError("chat completion: no choices")
        message = reply.choices[0].message
        answer = message.content or getattr(message, "reasoning_content", None) or ""
        tokens = reply.usage.completion_tokens if reply.usage else 0
        if not answer and not tokens:
            raise SmokeError("chat completion: empty answer and no completion tokens")
        out.append(f"chat: {tokens} tokens, finish_reason={reply.choices[0].finish_reason}: {answer[:120]!r}")

        streamed = await core.stream_chat(api, model, PROMPT, max_tokens, deadline, extra_body)
        if not streamed.ok:
            raise SmokeError(f"streamed chat completion: {streamed.error}")
        out.append(
            f"stream: {streamed.output_tokens} tokens, first token after {streamed.ttft:.3f} s, "
            f"finish_reason={streamed.finish_reason}: {streamed.text[:120]!r}"
        )

        evidence: dict[str, float] = {}
        if metrics_url:
            # Two requests went through; wait until the counters show them (or the wait runs out).
            end = time.monotonic() + METRICS_WAIT
            while True:
                after = core.deployment_requests(metrics_url)
                deltas = {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}
                evidence = _pd_roles(deltas)
                engines = sum(v for k, v in deltas.items() if "ingress" not in k.lower())
                seen_all = evidence.get("prefill", 0) >= 2 and evidence.get("decode", 0) >= 2
                if seen_all or (not expect_pd and not evidence and engines >= 2) or time.monotonic() > end:
                    break
                await asyncio.sleep(1.0)
            out.append(f"Ray Serve requests during the smoke, per deployment: {deltas or 'none'}")
            if evidence.get("prefill") and evidence.get("decode"):
                out.append(
                    f"prefill/decode: both handled the requests (prefill +{evidence['prefill']:g}, "
                    f"decode +{evidence['decode']:g})"
                )
        if expect_pd and not (evidence.get("prefill") and evidence.get("decode")):
            raise SmokeError(f"no evidence that both prefill and decode served (Ray metrics: {evidence or 'none'})")
        if kv_before is not None:
            out.append(await _kv_moved(metrics_url, kv_before, requests=2))
        return SmokeResult(model, models, answer, streamed.text, streamed.ttft, evidence, out)
