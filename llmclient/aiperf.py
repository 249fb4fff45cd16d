"""Running the load generator, AIPerf, from its own venv (`make bench-venv`: its pins clash with the dev and
rehearsal venvs'). One run per load point: its YAML configuration (measure.bench.aiperf_config, the API key
only as a reference to $OPENAI_API_KEY), its artifacts, its summary and per-request records."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from llmclient import ROOT
from ray_llm_eks.adapters import environment

REQUIREMENTS = ROOT / "llmclient" / "bench-requirements.txt"
CACHE = environment.cache_dir()
SUMMARY = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"


class AiperfFailed(RuntimeError):
    """AIPerf ended without a summary: one line of why, the log's path."""


def bench_venv() -> Path:
    """<cache root>/bench-venv-<first 12 hex of the requirements' sha256>, as the Makefile names it."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return Path(os.environ.get("RAY_LLM_EKS_BENCH_VENV", CACHE / f"bench-venv-{digest}"))


def executable(name: str = "aiperf") -> Path:
    path = bench_venv() / "bin" / name
    if not path.exists():
        raise AiperfFailed(f"{path} is missing: run `make bench-venv` (AIPerf and its pins, about 1.2 GB)")
    return path


@dataclass(frozen=True)
class PointResult:
    summary: dict  # profile_export_aiperf.json
    records: list[dict]  # profile_export.jsonl: one per request (metadata: conversation_id, turn_index, x_request_id)
    directory: Path


def run_point(config: dict, directory: Path, api_key: str | None, timeout: float) -> PointResult:
    """One AIPerf run of `config` (its artifacts under `directory`), at most `timeout` seconds."""
    directory.mkdir(parents=True, exist_ok=True)
    config = json.loads(json.dumps(config))
    config["benchmark"]["artifacts"]["dir"] = str(directory / "aiperf")
    config_file = directory / "aiperf.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    if api_key:
        env["OPENAI_API_KEY"] = api_key  # referenced from the config as ${OPENAI_API_KEY}
    log = directory / "aiperf.log"
    with log.open("w") as out:
        try:
            done = subprocess.run(
                [str(executable()), "profile", "--config", str(config_file)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise AiperfFailed(f"AIPerf did not finish within {timeout:g} s (log: {log})") from None
    summaries = sorted((directory / "aiperf").rglob(SUMMARY), key=lambda p: len(p.parts))
    if done.returncode != 0 or not summaries:
        reason = _failed_requests(directory / "aiperf") or _last_reason(log.read_text(errors="replace"))
        raise AiperfFailed(f"AIPerf exited {done.returncode}: {reason} (log: {log})")
    summary_file = summaries[0]
    records_file = summary_file.parent / RECORDS
    records = [json.loads(line) for line in records_file.read_text().splitlines() if line.strip()]
    return PointResult(json.loads(summary_file.read_text()), records, summary_file.parent)


# AIPerf 0.13.0 on a tokenizer it cannot load (common/tokenizer_validator.py): the traceback ends in
# "TokenizerError: Failed to load tokenizer 'NAME': TYPE: detail", its panel says "Failed to load tokenizer
# 'NAME'", and an alias lookup that fails logs "Failed to validate tokenizer 'NAME': detail" (all exit 1).
_TOKENIZER_FAILED = re.compile(r"Failed to (?:load|validate) tokenizer '(?P<name>[^']+)'(?:: (?P<detail>.+))?")
TOKENIZER_WAY_OUT = (
    "pass --tokenizer with the served model's Hugging Face id or a local directory of its tokenizer files "
    "(or --stack, whose model source it then takes)"
)


def _tokenizer_reason(lines: list[str]) -> str | None:
    hits = [m for m in map(_TOKENIZER_FAILED.search, lines) if m]
    if not hits:
        return None
    detail = next((m["detail"] for m in hits if m["detail"]), None)
    because = f" ({detail.strip()[:200]})" if detail else ""
    return f"AIPerf could not load the tokenizer '{hits[0]['name']}'{because}: {TOKENIZER_WAY_OUT}"


def _server_said(message: str) -> str:
    """The server's own words in an error record's message: an OpenAI-style body's error.message (vLLM's 400s),
    else the message as AIPerf wrote it; one line, at most 300 characters."""
    try:
        body = json.loads(message)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error") if isinstance(body.get("error"), dict) else body
        message = str(error.get("message") or body.get("detail") or message)
    return " ".join(message.split())[:300]


def _failed_requests(artifacts: Path) -> str | None:
    """Why the requests failed, where AIPerf recorded it (its per-request records, `error`: code, type, message):
    the commonest error, as the server said it; None where no record holds one."""
    errors: Counter[tuple[object, str]] = Counter()
    total = 0
    for path in artifacts.rglob(RECORDS):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            total += 1
            error = record.get("error") if isinstance(record, dict) else None
            if isinstance(error, dict):
                errors[(error.get("code"), _server_said(str(error.get("message") or error.get("type") or "")))] += 1
    if not errors:
        return None
    (code, said), count = errors.most_common(1)[0]
    status = f"HTTP {code}" if code else "an error"
    return (
        f"{sum(errors.values())} of {total} requests failed; the server answered {count} of them with {status}: {said}"
    )


def _last_reason(log: str) -> str:
    """AIPerf's own reason: a tokenizer it could not load, its closing error box or its last ERROR line."""
    lines = [line.strip(" │╭╰─") for line in log.splitlines()]
    tokenizer = _tokenizer_reason(lines)
    if tokenizer:
        return tokenizer
    for marker in ("Reason:", "ERROR"):
        hits = [line for line in lines if marker in line]
        if hits:
            return hits[-1].split(marker, 1)[-1].strip()[:300]
    return "no reason logged"
