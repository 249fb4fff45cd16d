"""The rehearsal's live checks of a topology, against a running Ray on loopback: replicas per role from Serve's
REST API, requests until every LLM replica has served one (Ray's per-replica counters), and which prefill
replicas the decode engine read KV from (engine logs). The judging is rehearsal.topology's (pure)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from llmclient import core, metrics
from rehearsal import logs, ray_token, topology

PROMPT = [{"role": "user", "content": "Count from one to ten."}]
METRICS_WAIT = 15.0  # s: Serve pushes every 0.1 s, Ray's agent exports at ray_cluster.METRICS_REPORT_INTERVAL_MS


def http_json(method: str, url: str, body: dict | None = None, timeout: float = 30.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    # Ray's token: the dashboard answers nothing but its health checks without it (rehearsal/ray_token.py).
    headers = {"Content-Type": "application/json", **ray_token.HEADERS}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:  # loopback only
        raw = response.read()
    return json.loads(raw) if raw else {}


def application(dashboard: str, app: str) -> dict:
    """The app's ApplicationDetails (Serve's REST API), {} while the dashboard does not answer."""
    try:
        status = http_json("GET", f"{dashboard}/api/serve/applications/", timeout=10)
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return (status.get("applications") or {}).get(app) or {}


def running(dashboard: str, app: str, role: str) -> list[dict]:
    """The RUNNING replicas of one LLM role now (each with its `deployment` name)."""
    return topology.running_replicas(application(dashboard, app)).get(role, [])


def served_so_far(metrics_urls: list[str]) -> dict[str, float]:
    """replica id -> requests so far, over every Ray node's metrics (each exports its own replicas)."""
    served: dict[str, float] = {}
    for url in metrics_urls:
        with urllib.request.urlopen(url, timeout=10) as response:  # loopback only
            served.update(topology.requests_per_replica(response.read().decode()))
    return served


async def serve_every_replica(
    url: str,
    model: str,
    metrics_urls: list[str],
    running: dict[str, list[dict]],
    concurrency: int,
    max_rounds: int = 8,
    api_key: str | None = None,
) -> tuple[dict[str, float], int, list[str]]:
    """Rounds of `concurrency` streamed requests until every RUNNING LLM replica has served one (Serve's
    router picks 2 random replicas and the shorter queue, so a few rounds suffice) or `max_rounds` ran.
    Returns (replica -> requests so far, requests sent, errors)."""
    sent, errors = 0, []
    served: dict[str, float] = {}
    async with core.client(url, api_key, timeout=120.0) as api:
        for _ in range(max_rounds):
            results = await asyncio.gather(
                *(core.stream_chat(api, model, PROMPT, 8, deadline=240.0) for _ in range(concurrency))
            )
            sent += len(results)
            errors += [r.error for r in results if not r.ok]
            end = time.monotonic() + METRICS_WAIT
            while True:
                served = served_so_far(metrics_urls)
                if not topology.idle_replicas(running, served) or time.monotonic() > end:
                    break
                await asyncio.sleep(1.0)
            if not topology.idle_replicas(running, served) or errors:
                break
    return served, sent, errors


def replica_log(log_dir: Path | Sequence[Path], replica: dict) -> str:
    """What a replica's process and the engine processes it spawned wrote (llmclient/metrics.py local_replica_log)."""
    return metrics.local_replica_log(logs.dirs(log_dir), replica)


def kv_sources(
    log_dir: Path | Sequence[Path], running: dict[str, list[dict]]
) -> tuple[dict[str, str | None], Counter[str]]:
    """(prefill replica id -> its NIXL engine id, remote engine id -> KV reads made by the decode replicas)."""
    engines = {r["replica_id"]: topology.engine_id(replica_log(log_dir, r)) for r in running.get("prefill", [])}
    reads: Counter[str] = Counter()
    for replica in running.get("decode", []):
        reads += topology.kv_reads(replica_log(log_dir, replica))
    return engines, reads
