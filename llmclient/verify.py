"""`make verify URL=... ARGS="--prometheus URL"`: prove that every request's KV cache moves from prefill to
decode over NIXL. Long-prompt requests go to the endpoint one at a time; the engines' own counters are read
before and after (from a Prometheus, Ray's metrics endpoints, or the Ray pods through the Kubernetes API,
never from the OpenAI endpoint), and measure/kv_proof.py judges them: each request's transfer of the size
its prompt weighs, no failed transfer, nothing recomputed on decode, the throughput floor, and the NIXL
backend the stack asks for (from the engines' logs, through the Ray dashboard's log API).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from llmclient import ROOT, core
from measure import kv_proof
from measure.kv_proof import KvCounters, KvShape, Sample, Verdict

# nixl 1.3.1 nixl/_api.py nixl_agent.__init__ logs one line per backend it instantiated.
BACKEND_LINE = re.compile(r"Backend (\w+) was instantiated")
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
]
MAX_TOKENS = 4
# Selective PD's short prompt: one word, the chat template's tokens around it (25 tokens on the rehearsal's
# stand-in tokenizer, a few dozen on a real model's); `make verify` fails unless it is below the threshold.
SHORT_PROMPT = "Hi."
POLL = 3.0  # s between readings while waiting for the counters to show the requests


class VerifyError(RuntimeError):
    """The check could not run (no endpoint, no metrics): one line."""


@dataclass(frozen=True)
class Sources:
    metrics: Callable[[], list[Sample]]  # every sample of kv_proof.SERIES, all engines
    logs: Callable[[], dict[str, str]] | None = None  # deployment -> its replicas' logs
    wait: float = 120.0  # s the counters may take to show the requests (Ray's export + a scrape)
    # s a request's count may trail it in `metrics`: Ray's export period, plus a scrape's where a Prometheus is read
    # (sources_from sets it; one poll where nothing says)
    lag: float = POLL


def prompt(words: int, rng: random.Random) -> str:
    """A prompt of about `words` words that shares no prefix with any other (a cached prefix moves no KV)."""
    nonce = "".join(rng.choices(string.ascii_lowercase, k=12))
    return " ".join([nonce, *(f"{rng.choice(WORDS)}{rng.randrange(1000)}" for _ in range(words))])


async def _ask(api, model: str, text: str) -> int:
    """One chat completion; its prompt tokens."""
    try:
        reply = await asyncio.wait_for(
            api.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text}], max_tokens=MAX_TOKENS
            ),
            core.DEFAULT_DEADLINE * 2,
        )
    except Exception as exc:
        raise VerifyError(f"a long-prompt request failed: {core._error_text(exc)}") from exc
    used = reply.usage.prompt_tokens if reply.usage else 0
    if not used:
        raise VerifyError("the endpoint reported no prompt tokens (usage missing)")
    return used


async def calibrate(url: str, model: str, api_key: str | None, seed: int) -> tuple[float, int]:
    """(prompt tokens per word of `prompt` for this model's tokenizer, the chat template included; its prompt
    tokens), from one short request sent before the first reading."""
    words = 64
    async with core.client(url, api_key, timeout=core.DEFAULT_TIMEOUT * 4) as api:
        used = await _ask(api, model, prompt(words, random.Random(seed)))
    return used / (words + 1), used


async def send(
    url: str, model: str, api_key: str | None, target_tokens: int, count: int, seed: int, tokens_per_word: float
) -> list[int]:
    """`count` chat completions of about `target_tokens` prompt tokens, one at a time; their prompt tokens."""
    rng = random.Random(seed)
    sent = []
    async with core.client(url, api_key, timeout=core.DEFAULT_TIMEOUT * 4) as api:
        for _ in range(count):
            words = max(8, int(target_tokens / tokens_per_word))
            sent.append(await _ask(api, model, prompt(words, rng)))
            tokens_per_word = sent[-1] / (words + 1)
    return sent


def read(sources: Sources) -> KvCounters:
    return kv_proof.counters(sources.metrics())


def split(prompt_tokens: list[int], local_below: int | None) -> list[int]:
    """The prompts that take the split path (all of them unless selective PD serves the shorter ones on decode)."""
    return [p for p in prompt_tokens if local_below is None or p >= local_below]


def settled(
    before: KvCounters, now: KvCounters, prompt_tokens: list[int], shape: KvShape, local_below: int | None = None
) -> bool:
    """The readings show every request on decode: the transfers of those that take the split path, every
    prompt's tokens by source, and (selective PD) every request counted by its path."""
    moving = split(prompt_tokens, local_below)
    transfers = now.transfers - before.transfers >= len(moving) * shape.transfers_per_request
    seen = sum(now.decode_tokens.values()) - sum(before.decode_tokens.values())
    counted = local_below is None or sum(now.paths.values()) - sum(before.paths.values()) >= len(prompt_tokens)
    return transfers and seen >= sum(prompt_tokens) and counted


def backends(logs: dict[str, str], role: str = "decode") -> set[str]:
    """NIXL backends the engines of `role` instantiated (their deployment's name holds the role)."""
    return {b for name, text in logs.items() if role in name.lower() for b in BACKEND_LINE.findall(text)}


def wait_settled(sources: Sources, before: KvCounters, prompt_tokens: list[int], shape: KvShape,
                 local_below: int | None) -> KvCounters:  # fmt: skip
    """The first reading that shows every one of `prompt_tokens` (`settled`), or the last when the wait runs out."""
    end = time.monotonic() + sources.wait
    while not settled(before, now := read(sources), prompt_tokens, shape, local_below):
        if time.monotonic() > end:
            break
        time.sleep(POLL)
    return now


def quiet(sources: Sources) -> KvCounters:
    """A reading once the roles' request counts held still for `sources.lag`: the requests sent before it, whose
    counts Ray exports on each worker's own cycle, counted in it rather than in the next window. Where they never
    hold (other traffic), the latest reading after `sources.wait`, and at least one lag and a poll."""
    end = time.monotonic() + max(sources.wait, sources.lag + POLL)
    held_since = time.monotonic()  # before the read: a slow read must not count towards the hold
    last = read(sources)
    while time.monotonic() < end:
        time.sleep(POLL)
        taken = time.monotonic()
        now = read(sources)
        if now.requests != last.requests:
            held_since = taken
        elif taken - held_since >= sources.lag:
            return now
        last = now
    return last


async def send_short(url: str, model: str, api_key: str | None, count: int) -> list[int]:
    """`count` chat completions of SHORT_PROMPT, one at a time; their prompt tokens."""
    async with core.client(url, api_key, timeout=core.DEFAULT_TIMEOUT * 4) as api:
        return [await _ask(api, model, SHORT_PROMPT) for _ in range(count)]


def run_short(
    url: str, model: str, api_key: str | None, shape: KvShape, sources: Sources, local_below: int, requests: int,
    say: Callable[[str], None] = print,
) -> Verdict:  # fmt: skip
    """Selective PD's other half: short prompts one at a time, each served by decode alone (kv_proof.judge_local)."""
    before = quiet(sources)  # the long prompts' prefill requests in it, not among the short ones'
    start = time.monotonic()
    sent = asyncio.run(send_short(url, model, api_key, requests))
    say(f"sent {len(sent)} short requests, one at a time, of {', '.join(map(str, sent))} prompt tokens")
    wait_settled(sources, before, sent, shape, local_below)
    # Transfers and prefill's requests are recorded apart from decode's counters: their lag again.
    time.sleep(max(POLL, sources.lag))
    verdict = kv_proof.judge_local(before, read(sources), sent, local_below, shape.transfers_per_request)
    verdict.lines.append(f"short prompts judged {time.monotonic() - start:.1f} s after the first was sent")
    return verdict


def run(
    url: str,
    model: str,
    api_key: str | None,
    shape: KvShape,
    floor_bytes_per_s: float | None,
    backend_asked: list[str],
    sources: Sources,
    target_tokens: int,
    requests: int = 3,
    say: Callable[[str], None] = print,
    local_below: int | None = None,
) -> Verdict:
    seed = int(time.time())
    start = read(sources)
    if not start.engines.get("decode"):
        raise VerifyError("no decode engine in the metrics: not a prefill/decode endpoint, or not scraped yet")
    tokens_per_word, calibration = asyncio.run(calibrate(url, model, api_key, seed))
    # The first reading once every counter shows the calibration request (its transfer and its prompt tokens
    # are recorded at different moments), or the wait ran out (a KV path that moves nothing).
    before = wait_settled(sources, start, [calibration], shape, local_below)
    sent = asyncio.run(send(url, model, api_key, target_tokens, requests, seed + 1, tokens_per_word))
    say(f"sent {len(sent)} requests, one at a time, of {', '.join(map(str, sent))} prompt tokens")
    if local_below is not None and (short := [p for p in sent if p < local_below]):
        raise VerifyError(f"a long prompt of {short[0]} tokens is below selectivePd {local_below}: decode prefills "
                          "it, no KV moves (--requests' prompts are 60% of max_model_len)")  # fmt: skip
    after = wait_settled(sources, before, sent, shape, local_below)
    seen = backends(sources.logs()) if sources.logs is not None else None
    verdict = kv_proof.judge(before, after, sent, shape, floor_bytes_per_s, backend_asked, seen)
    if local_below is not None:
        kv_proof.judge_split_path(verdict, before, after, len(sent))
    return verdict


# ---------------------------------------------------------------- from a stack (make verify)

# vLLM 0.26 platforms/interface.py _align_hybrid_block_size logs the attention block it settles on.
BLOCK_LINE = re.compile(r"Setting attention block size to (\d+) tokens")


@dataclass(frozen=True)
class Expectations:
    """What the decode engine of a deployed serve config should show."""

    model: str
    shape: KvShape
    floor_bytes_per_s: float | None
    backends: list[str]
    max_model_len: int
    app: str
    model_source: str
    local_below: int | None = None  # selectivePd: decode prefills prompts shorter than this itself


def expectations(doc: dict, model_spec, floor_bytes_per_s: float | None, hf_config: dict | None = None) -> Expectations:
    """From a serve document as deployed: its decode engine's arguments, the model's facts (`hf_config`: the
    model's config.json when it is a local directory, e.g. the rehearsal's stand-in; else the fit's table or
    the stack's modelSpec)."""
    from ray_llm_eks.domain.serving import role_view
    from ray_llm_eks.domain.serving.serve_app import parse_document

    deployed = parse_document(doc, "deployed")
    if "decode" not in deployed.roles:
        raise VerifyError("the serve config has no prefill/decode application: no KV moves to verify")
    spec = _model_facts(*deployed.roles["decode"].model.id_and_source, model_spec, hf_config)
    decode = role_view.view_of("decode", deployed.roles["decode"], lambda *_: spec.max_context)
    transfer = decode.engine.kv_transfer_config
    extra = (transfer.kv_connector_extra_config if transfer is not None else None) or {}
    return Expectations(
        model=decode.model_id,
        shape=kv_proof.shape_of(spec, decode.engine),
        floor_bytes_per_s=floor_bytes_per_s,
        backends=list(extra.get("backends") or []),
        max_model_len=decode.max_model_len,
        app=deployed.application.name,
        model_source=decode.model_source,
        local_below=deployed.local_prefill_below,
    )


def _model_facts(model_id: str, source: str, model_spec, hf_config: dict | None):
    """The served model's facts: its config.json when given (a local model), else the fit's table or modelSpec."""
    from ray_llm_eks.domain.serving import model_table

    return (
        kv_proof.spec_from_hf_config(hf_config) if hf_config else model_table.model_spec(model_id, source, model_spec)
    )


def served_context(model_spec) -> Callable[[str, str], int]:
    """The derived maximum length of a served model (ray_llm_eks/domain/serving/role_view.py view_of's `max_context`): a
    local model's config.json (the rehearsal's stand-in, --weights), else the fit's table or the stack's modelSpec."""

    def context(model_id: str, source: str) -> int:
        return _model_facts(model_id, source, model_spec, _local_config(source) if source else None).max_context

    return context


def logged_block_size(logs: dict[str, str]) -> int | None:
    """The attention block size the decode engine settled on, where it logged one (hybrid models)."""
    sizes = {int(n) for name, text in logs.items() if "decode" in name.lower() for n in BLOCK_LINE.findall(text)}
    return sizes.pop() if len(sizes) == 1 else None


def target_tokens(max_model_len: int) -> int:
    """Long prompts that still fit: 60% of the context (the answer and the chat template need room)."""
    return max(64, int(max_model_len * 0.6))


def add_arguments(p) -> None:
    p.add_argument("--stack", required=True, help="the stack deployed at URL (what to expect)")
    add_metrics_arguments(p)
    p.add_argument("--dashboard", help="the Ray dashboard's URL, to read the engines' NIXL backend from their logs")
    p.add_argument(
        "--log-dir",
        action="append",
        type=Path,
        default=[],
        help="Ray's session log directory on this "
        "machine (repeatable; with --dashboard): the engines' logs read from their files, not the API",
    )
    p.add_argument("--served-config", type=Path, help="the serve config as deployed (default: the stack's)")
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--floor-gbps", type=float, help="KV throughput floor in GB/s (default: the stack's alert floor)")
    p.add_argument("--wait", type=_seconds, default=120.0, help="how long the counters may take to show the requests")
    p.add_argument(
        "--metrics-lag",
        type=_seconds,
        help="seconds a request's count may trail it in the metrics read: Ray's export period, plus the scrape "
        "interval with --prometheus (default: the stack's, Ray's 10 s export and its Prometheus's 30 s scrape); "
        "selective PD's short prompts wait it out before and after",
    )


def _seconds(text: str) -> float:
    """A finite number of seconds, 0 or more (argparse prints the refusal as one line)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return value


def add_metrics_arguments(p) -> None:
    """Where the engines' metrics are read from (`make verify` and `make bench` alike)."""
    p.add_argument("--prometheus", help="a Prometheus that scrapes the Ray pods (its base URL)")
    p.add_argument("--metrics-url", action="append", default=[], help="a Ray metrics endpoint (repeatable)")
    p.add_argument("--kube", action="store_true", help="read the Ray pods through the Kubernetes API (KUBECONFIG)")


def _kube_client():
    from ray_llm_eks.adapters import kube_client

    text, folder = kube_client.environment_kubeconfig()
    return kube_client.KubeClient.from_kubeconfig(text, folder)


def kv_reader(args, namespace: str | None) -> Callable[[], list[Sample]] | None:
    """The engines' KV series (kv_proof.SERIES) from where `add_metrics_arguments` said, or None when it said
    nothing. `namespace`: the RayService's, for --kube (from the stack)."""
    from llmclient import metrics as adapter

    if args.kube:
        if namespace is None:
            raise VerifyError("--kube needs the stack (--stack) to know the RayService's namespace")
        client = _kube_client()
        return lambda: adapter.kube_pods(client, namespace, kv_proof.SERIES)
    if args.prometheus:
        return lambda: adapter.prometheus(args.prometheus, kv_proof.SERIES)
    if args.metrics_url:
        return lambda: adapter.scrape(args.metrics_url, kv_proof.SERIES)
    return None


def sources_from(args, settings, app: str) -> Sources:
    from llmclient import metrics as adapter

    logs = None
    read_metrics = kv_reader(args, settings.serving.namespace)
    if read_metrics is None:
        raise VerifyError("say where the engines' metrics are: --prometheus URL, --metrics-url URL or --kube")
    if args.kube:
        ns = settings.serving.namespace
        fetch = adapter.kube_dashboard(_kube_client(), ns, f"{settings.serving.service_name}-head-svc")
        logs = lambda: adapter.replica_logs(fetch, app)  # noqa: E731
    if args.dashboard:
        fetch = adapter.dashboard(args.dashboard)
        logs = lambda: adapter.replica_logs(fetch, app, args.log_dir)  # noqa: E731
    return Sources(read_metrics, logs, args.wait, metrics_lag(args))


def metrics_lag(args) -> float:
    """How long a request's count may trail it where `args` reads the metrics (a Prometheus adds its scrape)."""
    from ray_llm_eks.domain.telemetry import observability

    if args.metrics_lag is not None:
        return args.metrics_lag
    return observability.RAY_METRICS_EXPORT_S + (observability.SCRAPE_INTERVAL_S if args.prometheus else 0)


def _local_config(source: str) -> dict | None:
    path = Path(source) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def main(args) -> int:
    from llmclient import metrics as adapter
    from ray_llm_eks.adapters import stack
    from ray_llm_eks.adapters.botocore_facts import BotocoreFactsMissing
    from ray_llm_eks.adapters.stackfile import StackFileError
    from ray_llm_eks.domain.core.errors import ConfigError
    from ray_llm_eks.domain.render import alert_rules
    from ray_llm_eks.domain.serving.serve_app import document_dict

    try:
        settings = stack.load_settings(stack.stack_file(args.stack, ROOT))
        doc = yaml.safe_load(args.served_config.read_text()) if args.served_config else None
        doc = doc or document_dict(settings.serving.serve_document)
        floor = args.floor_gbps * 1e9 if args.floor_gbps else alert_rules.rule_inputs(settings).kv_floor_bytes_per_s
        configs = doc["applications"][0].get("args") or {}
        source = ((configs.get("decode_config") or {}).get("model_loading_config") or {}).get("model_source") or ""
        want = expectations(doc, settings.serving.model_spec, floor, _local_config(source) if source else None)
        sources = sources_from(args, settings, want.app)
        shape = want.shape
        if sources.logs is not None and (block := logged_block_size(sources.logs())):
            shape = replace(shape, block_size=block)
        verdict = run(
            args.url,
            args.model or want.model,
            args.api_key,
            shape,
            want.floor_bytes_per_s,
            want.backends,
            sources,
            target_tokens(want.max_model_len),
            args.requests,
            local_below=want.local_below,
        )
        if want.local_below is not None:
            short = run_short(args.url, args.model or want.model, args.api_key, shape, sources, want.local_below,
                              args.requests)  # fmt: skip
            verdict.lines += short.lines
            verdict.failures += short.failures
    except (VerifyError, adapter.MetricsError, OSError, ConfigError, StackFileError, BotocoreFactsMissing) as exc:
        print(f"VERIFY FAILED: {exc}")
        return 1
    for line in verdict.lines:
        print(f"  {line}")
    if not verdict.ok:
        print(f"VERIFY FAILED: {verdict.failures[0]}")
        return 1
    if want.local_below is not None:
        print(f"verify passed: every long prompt's KV moved from prefill to decode over NIXL; every short one (below "
              f"selectivePd {want.local_below} tokens) was served by decode alone, no KV moved")  # fmt: skip
        return 0
    print("verify passed: every request's KV moved from prefill to decode over NIXL")
    return 0
