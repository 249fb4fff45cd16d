"""The fault rehearsal's own client: a steady stream of small greedy requests, each classified by what the
caller saw (HTTP status, a stream cut mid-way, a 200 whose content is empty or differs from a healthy run's
answer to the same prompt), with its start and end time, so a fault's window can be judged request by request.

Greedy answers of a random tiny model differ between runs wherever two tokens are nearly tied (CPU float
sums in another order flip them): a reference answer is compared only over its clear prefix, the tokens
whose top-1 logprob leads the runner-up by at least `margin` (and only up to the first token that does not).
A prompt whose first token is not clear compares nothing and is not used.

The classification is pure (`classify`, `clear_prefix`, `window`); `run` and `reference` talk HTTP (aiohttp,
which Ray already brings into both venvs: raw status codes and stream lines, no retries)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import aiohttp

# Outcomes of one request, as the caller saw it.
OK = "ok"
WRONG = "wrong"  # 200, content differs from the healthy answer over its clear prefix
EMPTY = "empty"  # 200, no content at all
CUT = "cut"  # 200, the stream ended without a finish_reason or [DONE] (or broke mid-way)
FAILED = "failed"  # an HTTP error status, or no response (connection refused/reset, timeout)
OUTCOMES = (OK, WRONG, EMPTY, CUT, FAILED)

# Many short prompts: a random stand-in model leads clearly on the first token for only some of them (those are
# kept, `usable`), and the load is a mix of them.
_SUBJECTS = ("the sea", "a cat", "the moon", "bread", "a river", "winter", "a city", "music", "a tree", "the sun",
             "a book", "rain")  # fmt: skip
PROMPTS = tuple(f"{verb} {subject}." for verb in ("Describe", "Name one fact about") for subject in _SUBJECTS)
MAX_TOKENS = 12
# Nats between top-1 and runner-up. The stand-in's random weights (initializer_range 0.02) lead by a few hundredths,
# in steps of ~0.008 (bf16 logits); under a healthy load of two requests at a time, tokens leading by 0.02 flipped
# (docs/measurements.md), so a token counts as clear from 0.06 (~8 steps). A too small margin shows as a
# wrong answer in the healthy window before each fault, which fails the rehearsal.
DEFAULT_MARGIN = 0.06


@dataclass(frozen=True)
class Reference:
    prompt: str
    tokens: tuple[str, ...]  # the healthy run's greedy tokens
    margins: tuple[float, ...]  # top-1 logprob minus runner-up, per token

    def expected(self, margin: float = DEFAULT_MARGIN) -> tuple[str, ...]:
        """The clear prefix, token by token (compared as tokens: a token's own text is not always a prefix of
        the detokenised answer, e.g. a byte-level token that splits a character)."""
        return self.tokens[: clear_prefix(self.margins, margin)]


def clear_prefix(margins: tuple[float, ...] | list[float], margin: float = DEFAULT_MARGIN) -> int:
    """How many leading tokens are clear (each leads its runner-up by at least `margin`)."""
    n = 0
    for m in margins:
        if m < margin:
            break
        n += 1
    return n


@dataclass
class Outcome:
    prompt: str
    outcome: str
    start: float  # seconds on the load's clock
    end: float
    status: int | None = None  # HTTP status (None: no response)
    detail: str = ""
    text: str = ""


def classify(
    status: int | None, finished: bool, text: str, expected: tuple[str, ...], error: str = "", tokens=()
) -> tuple[str, str]:
    """(outcome, detail) of one request: `finished` is whether the stream ended properly (a finish_reason and
    [DONE]); `expected` the clear prefix of the healthy answer's tokens (empty: not compared); `tokens` the
    answer's tokens as the stream's logprobs name them."""
    if status is None or status != 200:
        return FAILED, error or f"HTTP {status}"
    if not finished:
        return CUT, error or "stream ended before its finish_reason/[DONE]"
    if not text and not tokens:
        return EMPTY, "200 with no content"
    if expected and tuple(tokens[: len(expected)]) != tuple(expected):
        return WRONG, f"expected tokens {list(expected)!r}..., got {list(tokens[: len(expected) + 2])!r}"
    return OK, ""


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _body(model: str, prompt: str, stream: bool) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "seed": 0,
        "stream": stream,
    }
    # The answer's tokens as vLLM names them; the reference also asks each token's runner-up. A stream asks
    # return_token_ids too: with a reasoning or tool parser, vLLM 0.26 streams no chunk for a token whose text is
    # empty (entrypoints/openai/chat_completion/serving.py, "if delta_message is None": `continue` unless
    # return_token_ids), and that token's logprobs go with it; the reference, not streamed, names every token.
    body |= {"logprobs": True} | ({"return_token_ids": True} if stream else {"top_logprobs": 2})
    return body


async def reference(
    url: str, model: str, api_key: str | None = None, prompts=PROMPTS, timeout: float = 180.0
) -> list[Reference]:
    """The healthy run's greedy answer to each prompt, with each token's lead over its runner-up."""
    refs = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
        for prompt in prompts:
            async with http.post(
                f"{url.rstrip('/')}/v1/chat/completions", json=_body(model, prompt, False), headers=_headers(api_key)
            ) as response:
                response.raise_for_status()
                answer = await response.json()
            content = (answer["choices"][0].get("logprobs") or {}).get("content") or []
            tokens, margins = [], []
            for item in content:
                tops = sorted((t["logprob"] for t in item.get("top_logprobs") or []), reverse=True)
                tokens.append(item["token"])
                margins.append(tops[0] - tops[1] if len(tops) > 1 else float("inf"))
            refs.append(Reference(prompt, tuple(tokens), tuple(margins)))
    return refs


async def one_request(
    http: aiohttp.ClientSession, url: str, model: str, ref: Reference, clock: Callable[[], float], api_key: str | None
) -> Outcome:
    start = clock()
    status, finished, parts, tokens, error = None, False, [], [], ""
    try:
        async with http.post(
            f"{url.rstrip('/')}/v1/chat/completions", json=_body(model, ref.prompt, True), headers=_headers(api_key)
        ) as response:
            status = response.status
            if status != 200:
                error = f"HTTP {status}: {(await response.read())[:160].decode(errors='replace')}"
            else:
                reason = None
                async for raw in response.content:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("data: "):
                        continue
                    data = line[6:].strip()
                    if data == "[DONE]":
                        finished = reason is not None
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:  # vLLM reports a failure inside a 200 stream as an error event
                        error = f"error event: {str(chunk['error'])[:160]}"
                        break
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        parts.append((delta.get("content") or "") + (delta.get("reasoning_content") or ""))
                        tokens += [t["token"] for t in (choice.get("logprobs") or {}).get("content") or []]
                        reason = choice.get("finish_reason") or reason
    except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError) as exc:
        error = f"{type(exc).__name__}: {str(exc)[:160]}"
    text = "".join(parts)
    outcome, detail = classify(status, finished, text, ref.expected(), error, tokens)
    return Outcome(ref.prompt, outcome, start, clock(), status, detail, text[:80])


@dataclass
class Load:
    """A steady load: `concurrency` loops, each sending one request after another until stopped."""

    url: str
    model: str
    refs: list[Reference]
    api_key: str | None = None
    concurrency: int = 2
    timeout: float = 120.0
    outcomes: list[Outcome] = field(default_factory=list)
    clock_start: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.clock_start

    async def run(self, stop: asyncio.Event, target: Callable[[], str] | None = None) -> None:
        """Until `stop` is set; `target()` may change the URL between requests (the head's proxy gone)."""
        refs = [r for r in self.refs if r.expected()] or self.refs

        async def loop(i: int) -> None:
            timeout = aiohttp.ClientTimeout(total=self.timeout)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                n = i
                while not stop.is_set():
                    url = target() if target else self.url
                    self.outcomes.append(
                        await one_request(http, url, self.model, refs[n % len(refs)], self.now, self.api_key)
                    )
                    n += self.concurrency
                    if self.outcomes[-1].outcome == FAILED:
                        await asyncio.sleep(0.5)  # no hammering of a refusing endpoint

        await asyncio.gather(*(loop(i) for i in range(self.concurrency)))


@dataclass
class Window:
    """What the caller saw from one fault's injection until the endpoint served again."""

    fault: str
    requests: int
    outcomes: dict[str, int]
    http_codes: dict[str, int]  # status (or "none") -> failed requests
    serving_again_s: float | None  # injection -> start of the first good request after the last bad one
    slowest_ok_s: float | None  # the longest a request answered correctly took (a stall shows here, not as errors)
    examples: list[str]

    def as_dict(self) -> dict:
        return asdict(self)


def window(fault: str, outcomes: list[Outcome], t_inject: float, t_end: float) -> Window:
    """Judge the requests that ended after the injection and started before `t_end`."""
    inside = sorted((o for o in outcomes if o.end >= t_inject and o.start <= t_end), key=lambda o: o.start)
    counts = Counter(o.outcome for o in inside)
    codes = Counter(str(o.status) if o.status is not None else "none" for o in inside if o.outcome == FAILED)
    bad = [o for o in inside if o.outcome != OK]
    if not bad:
        again = 0.0 if inside else None
    else:
        last_bad = max(o.start for o in bad)
        good_after = [o.start for o in inside if o.outcome == OK and o.start > last_bad]
        again = max(0.0, min(good_after) - t_inject) if good_after else None
    examples = [f"{o.outcome} at +{o.start - t_inject:.1f} s: {o.detail[:140]}" for o in bad[:4]]
    slowest = max((o.end - o.start for o in inside if o.outcome == OK), default=None)
    outcomes_by_kind = {k: counts.get(k, 0) for k in OUTCOMES}
    return Window(fault, len(inside), outcomes_by_kind, dict(codes), again, slowest, examples)
