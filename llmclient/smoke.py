"""Prove an OpenAI-compatible endpoint serves: with a key, that it refuses no key and a wrong one and
serves the right one; list models, one chat completion, one streamed; and, for a prefill/decode app,
evidence from Ray's metrics that both the prefill and the decode deployment handled the requests."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass, field

import httpx2
import openai

from llmclient import core, metrics
from measure import kv_proof

PROMPT = [{"role": "user", "content": "Say hello in one short sentence."}]
TOOL_PROMPT = [{"role": "user", "content": "What is the weather in Paris?"}]
# One function whose arguments have a single shape: a tool call back is the parser's work, whatever the model.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TOOL_MAX_TOKENS = 64  # room for {"city": "Paris"} in any tokenizer, with the whitespace JSON allows
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


async def without_a_key(url: str, timeout: float, deadline: float) -> str:
    """No key given: an endpoint that refuses requests without one fails the smoke saying where the key is; one
    that serves them (apiKeyCheck false) is said to, the key check not run."""
    models = f"{core.api_base(url)}/models"
    try:
        status = await asyncio.wait_for(core.http_status(models, None, None, timeout), deadline)
    except (OSError, httpx2.HTTPError, TimeoutError) as exc:
        raise SmokeError(f"list models at {models} without a key: {core._error_text(exc)}") from exc
    if status == 401:
        raise SmokeError(
            "the endpoint refuses requests without an API key (HTTP 401), and none was given: export "
            "OPENAI_API_KEY=<one of the stack's apiKeys> (pulumi config get apiKeys, or pulumi stack output apiKey "
            "--show-secrets where the stack generated it); with it, smoke checks that no key and a wrong key get 401"
        )
    return (
        f"API key: none given (OPENAI_API_KEY is unset) and /v1/models answered HTTP {status} without one: the "
        "key check was not run (only an endpoint with apiKeyCheck false serves requests without a key)"
    )


async def tool_call(api, model: str, deadline: float) -> str:
    """Tool calling as OpenAI clients use it: `tool_choice` auto is accepted (vLLM refuses it without a tool call
    parser), and `tool_choice` naming a function gets a call of it back, parsed by the server; what the model
    chooses is not judged (a rehearsal's stand-in is random)."""
    named = {"type": "function", "function": {"name": "get_weather"}}
    try:
        auto = await asyncio.wait_for(
            api.chat.completions.create(
                model=model, messages=TOOL_PROMPT, tools=[WEATHER], tool_choice="auto", max_tokens=TOOL_MAX_TOKENS
            ),
            deadline,
        )
        forced = await asyncio.wait_for(
            api.chat.completions.create(
                model=model, messages=TOOL_PROMPT, tools=[WEATHER], tool_choice=named, max_tokens=TOOL_MAX_TOKENS
            ),
            deadline,
        )
    except openai.BadRequestError as exc:
        raise SmokeError(
            f"tools: the endpoint refuses a request with tools: {core._error_text(exc)} (the served model's family "
            "needs a tool_call_parser: ray_llm_eks/domain/serving/model_families.py, or --no-tools)"
        ) from exc
    except Exception as exc:
        raise SmokeError(f"tools: {core._error_text(exc)}") from exc
    calls = (forced.choices[0].message.tool_calls or []) if forced.choices else []
    if not calls or calls[0].function.name != "get_weather":
        raise SmokeError(f"tools: tool_choice naming get_weather got no call of it back: {forced.choices[:1]}")
    arguments = calls[0].function.arguments or ""
    try:
        shown = f"arguments {json.dumps(json.loads(arguments))}"
    except ValueError:
        shown = f"arguments cut at max_tokens {TOOL_MAX_TOKENS}: {arguments[:60]!r}"
    made = len(auto.choices[0].message.tool_calls or []) if auto.choices else 0
    return f"tools: tool_choice auto accepted ({made} call(s)); tool_choice get_weather -> a get_weather call, {shown}"


def _pd_roles(deltas: dict[str, float]) -> dict[str, float]:
    roles: dict[str, float] = {}
    for name, count in deltas.items():
        for role in ("Prefill", "Decode"):
            if role.lower() in name.lower():
                roles[role.lower()] = roles.get(role.lower(), 0.0) + count
    return roles


async def key_check(
    url: str, api_key: str, timeout: float = core.DEFAULT_TIMEOUT, deadline: float = core.DEFAULT_DEADLINE
) -> str:
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
            seen[case] = await asyncio.wait_for(core.http_status(target, key, payload, timeout), deadline)
        except (OSError, httpx2.HTTPError, TimeoutError) as exc:
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
    tools: bool = True,
) -> SmokeResult:
    async with core.client(url, api_key, timeout) as api:
        out: list[str] = []
        if api_key:
            out.append(await key_check(url, api_key, timeout, deadline))
        else:
            out.append(await without_a_key(url, timeout, deadline))
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

        out.append(await tool_call(api, model, deadline) if tools else "tools: not checked (--no-tools)")

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
            out.append(await _kv_moved(metrics_url, kv_before, requests=4 if tools else 2))
        return SmokeResult(model, models, answer, streamed.text, streamed.ttft, evidence, out)
