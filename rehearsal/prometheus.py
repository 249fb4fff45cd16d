"""A real Prometheus beside the rehearsal: the version kube-prometheus-stack 88.5 deploys (v3.14.0, built from
its Go module by go_binaries/build.py), scraping the rehearsal's Ray metrics endpoints on loopback, with the
stack's own rules (ray_llm_eks/domain/telemetry/alerts.py). It is one of the rehearsal's processes (it carries the run's
marker, so the teardown ends it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import yaml

from go_binaries import build
from ray_llm_eks.adapters.ports import free_port
from rehearsal import ray_cluster
from rehearsal.context import RehearsalFailed

# Scraping and evaluating as often as the rehearsal's Ray exports keeps a run short. In a cluster the stack's
# observability.SCRAPE_INTERVAL_S applies.
INTERVAL_MS = ray_cluster.METRICS_REPORT_INTERVAL_MS
INTERVAL = f"{INTERVAL_MS}ms"


def binary(wait: float, say) -> Path:
    """The built prometheus, waiting up to `wait` s for the e2e build (CI builds it in the background)."""
    directory = build.component_dir(build.PROMETHEUS)
    end = time.monotonic() + wait
    said = False
    while not (directory / ".built").is_file():
        if time.monotonic() > end:
            raise RehearsalFailed(
                f"no Prometheus built under {directory} after {wait:g} s: run `python3 -m go_binaries.build prometheus`"
            )
        if not said:
            say(f"  waiting for the e2e build's Prometheus ({directory}) ...")
            said = True
        time.sleep(5)
    return directory / "prometheus"


TARGETS_FILE = "targets.json"


def config(targets_file: str, rules_file: str) -> dict:
    """Targets from a file Prometheus watches (file_sd), as a pod's address is found anew in a cluster: a Ray
    node started again can export on another port, and the rehearsal rewrites the file (`retarget`)."""
    return {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [rules_file],
        "scrape_configs": [
            {"job_name": "ray", "file_sd_configs": [{"files": [targets_file], "refresh_interval": INTERVAL}]}
        ],
    }


def retarget(directory: Path, metrics_urls: list[str]) -> None:
    """Write the scrape targets (host:port of each metrics URL) where Prometheus reads them; atomically, so that
    Prometheus never reads half a file."""
    targets = [urllib.parse.urlsplit(u).netloc for u in metrics_urls]
    partial = directory / f"{TARGETS_FILE}.partial"
    partial.write_text(json.dumps([{"targets": targets}]))
    partial.replace(directory / TARGETS_FILE)


def fresh_storage(directory: Path) -> Path:
    """An empty TSDB for this run. The run directory is per stack and outlives a run: a kept TSDB replays the
    last run's series from its WAL, and an alert that run fired (--kv-fault's NixlTransferFailed) fires again in
    the next, healthy run while those samples are within the query lookback (5 min)."""
    data = directory / "data"
    shutil.rmtree(data, ignore_errors=True)
    return data


def start(
    executable: Path, directory: Path, metrics_urls: list[str], rules: dict, env: dict[str, str]
) -> tuple[str, subprocess.Popen]:
    """Start it (loopback only) and wait until it is ready; its URL and process."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False, width=1000))
    retarget(directory, metrics_urls)
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config(TARGETS_FILE, "rules.yaml"), sort_keys=False))
    data = fresh_storage(directory)
    port = free_port()
    log = (directory / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            str(executable),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=directory,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as response:
                if response.status == 200:
                    return url, process
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > end:
            tail = (directory / "prometheus.log").read_text(errors="replace")[-600:]
            raise RehearsalFailed(f"Prometheus did not become ready within 60 s: {tail}")
        time.sleep(1)


def api(url: str, path: str, **params) -> dict:
    """One call of Prometheus's HTTP API; its `data`, or RehearsalFailed with Prometheus's error."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    try:
        with urllib.request.urlopen(f"{url}{path}{query}", timeout=30) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 400/422: the query's own error is in the body
        body = json.loads(exc.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RehearsalFailed(f"Prometheus at {url}: {exc}") from None
    if body.get("status") != "success":
        raise QueryError(body.get("error") or str(body))
    return body["data"]


class QueryError(RuntimeError):
    """Prometheus refused or failed a query: its own message."""


def query(url: str, expr: str) -> list[dict]:
    """An instant query's series, each with its `value` ([time, text]); a scalar answer as one such."""
    data = api(url, "/api/v1/query", query=expr)
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": data["result"]}]
    return data["result"]


def query_range(url: str, expr: str, seconds: float, step: float) -> list[dict]:
    """A range query over the last `seconds` (what a Grafana panel asks for): each series with its `values`."""
    end = time.time()
    data = api(url, "/api/v1/query_range", query=expr, start=end - seconds, end=end, step=step)
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "values": [data["result"]]}]
    return data["result"]


def firing(url: str) -> list[str]:
    return sorted(a["labels"]["alertname"] for a in api(url, "/api/v1/alerts")["alerts"] if a["state"] == "firing")


def active_since(url: str, alertname: str) -> float | None:
    """When the alert turned active (Unix seconds; it fires from then on with `for: 0m`), None if it is not."""
    since = [
        _unix(a["activeAt"])
        for a in api(url, "/api/v1/alerts")["alerts"]
        if a["labels"].get("alertname") == alertname and a["state"] == "firing"
    ]
    return min(since) if since else None


def _unix(rfc3339: str) -> float:
    """Prometheus writes nanoseconds ("2026-12-01T17:01:02.123456789Z"); Python reads at most microseconds."""
    whole, _, rest = rfc3339.rstrip("Z").partition(".")
    fraction = float(f"0.{rest}") if rest else 0.0
    return datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp() + fraction


def rules(url: str) -> list[dict]:
    return [r for g in api(url, "/api/v1/rules")["groups"] for r in g["rules"]]
