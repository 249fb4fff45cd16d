"""Reading engine metrics from where they are: a Prometheus (its HTTP query API), Ray's own metrics endpoints
(Prometheus text), or the Ray pods through the Kubernetes API server's pod proxy. Each returns
measure.kv_proof.Sample rows of the series asked for; what they mean is domain's business.

Also the Ray dashboard's HTTP API (Serve's application status, the replicas' logs), directly or through
the API server's service proxy: the NIXL backend an engine uses is in its log only.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from measure.kv_proof import Sample
from ray_llm_eks.adapters.kube_client import KubeClient
from ray_llm_eks.domain.core import facts
from ray_llm_eks.domain.security import ray_auth

TIMEOUT = 30.0
RAY_METRICS_PORT = facts.HEAD_PORTS["metrics"]  # every Ray pod's, not the head's only (KubeRay's default)
RAY_NODE_SELECTOR = "ray.io/is-ray-node=yes"  # KubeRay labels every Ray pod so


class MetricsError(RuntimeError):
    """A source that could not be read: one line saying which and why."""


def _get(url: str, timeout: float = TIMEOUT, headers: dict[str, str] | None = None) -> str:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as response:
            return response.read().decode()
    except (OSError, ValueError) as exc:
        raise MetricsError(f"GET {url}: {exc}") from None


def parse_text(text: str, names: Iterable[str]) -> list[Sample]:
    """The samples of `names` in Prometheus text (prometheus_client's parser; histogram series by full name)."""
    wanted = set(names)
    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in wanted
    ]


def scrape(urls: Iterable[str], names: Iterable[str]) -> list[Sample]:
    """Ray's metrics endpoints (one per Ray node), read directly."""
    names = list(names)
    return [sample for url in urls for sample in parse_text(_get(url), names)]


def prometheus(url: str, names: Iterable[str]) -> list[Sample]:
    """The current value of every series of `names` in a Prometheus (instant query over its HTTP API)."""
    selector = '{__name__=~"' + "|".join(re.escape(n) for n in names) + '"}'
    query = urllib.parse.urlencode({"query": selector})
    body = _get(f"{url.rstrip('/')}/api/v1/query?{query}")
    try:
        answer = json.loads(body)
    except ValueError:
        raise MetricsError(f"{url}: not a Prometheus query API answer: {body[:200]!r}") from None
    if answer.get("status") != "success":
        raise MetricsError(f"{url}: query failed: {answer.get('error', answer)}")
    return [
        Sample(r["metric"].get("__name__", ""), r["metric"], float(r["value"][1])) for r in answer["data"]["result"]
    ]


def kube_pods(client: KubeClient, namespace: str, names: Iterable[str]) -> list[Sample]:
    """Every Ray pod's metrics in `namespace`, through the API server's pod proxy (no port-forward)."""
    names = list(names)
    pods = client.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={urllib.parse.quote(RAY_NODE_SELECTOR)}")
    samples = []
    for pod in (pods or {}).get("items", []):
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        name = pod["metadata"]["name"]
        text = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}:{RAY_METRICS_PORT}/proxy/metrics")
        samples += parse_text(text if isinstance(text, str) else json.dumps(text), names)
    return samples


Fetch = Callable[[str], str]  # a path of the Ray dashboard's API -> its body


def dashboard(url: str) -> Fetch:
    """The Ray dashboard at `url` (rehearsal, or a port-forward), with Ray's token from RAY_AUTH_TOKEN where set
    (the stack's Ray cluster requires it: `pulumi stack output dashboardTokenCommand` prints it)."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return lambda path: _get(f"{url.rstrip('/')}{path}", headers=headers)


def kube_dashboard(client: KubeClient, namespace: str, head_service: str) -> Fetch:
    """The Ray dashboard through the API server's service proxy, with Ray's token read from its Secret (with the
    same Kubernetes access) and sent as X-Ray-Authorization: the proxy takes Authorization for itself, and Ray's
    dashboard reads that header behind a proxy (Ray 2.58 _private/authentication/http_token_authentication.py)."""
    base = f"/api/v1/namespaces/{namespace}/services/{head_service}:{facts.DASHBOARD_PORT}/proxy"
    secret = client.get_or_none(f"/api/v1/namespaces/{namespace}/secrets/{ray_auth.SECRET_NAME}") or {}
    encoded = (secret.get("data") or {}).get(ray_auth.SECRET_KEY)
    headers = {"X-Ray-Authorization": f"Bearer {base64.b64decode(encoded).decode()}"} if encoded else {}

    def fetch(path: str) -> str:
        body = client.request_warned("GET", base + path, extra_headers=headers)[0]
        return body if isinstance(body, str) else json.dumps(body)

    return fetch


def replica_logs(fetch: Fetch, app: str, log_dirs: Iterable[Path] = (), tries: int = 3) -> dict[str, str]:
    """deployment -> what its replicas' processes (and the engine processes they spawned) wrote. From `log_dirs`
    (Ray's session log directories on this machine: a rehearsal's) where given, else through Ray's state API
    (/api/v0/logs/file by actor id, stdout and stderr), each file asked up to `tries` times: the API reads a whole
    file within its own timeout, which a loaded machine can miss. A file that cannot be read raises MetricsError
    naming it: a missing log must not read as an engine that logged nothing."""
    status = json.loads(fetch("/api/serve/applications/"))
    deployments = ((status.get("applications") or {}).get(app) or {}).get("deployments") or {}
    folders = list(log_dirs)
    logs: dict[str, str] = {}
    for name, deployment in deployments.items():
        for replica in deployment.get("replicas") or []:
            text = local_replica_log(folders, replica) if folders else _api_replica_log(fetch, replica, tries)
            logs[name] = logs.get(name, "") + text
    return logs


def local_replica_log(log_dirs: Iterable[Path], replica: Mapping) -> str:
    """A replica's log files in Ray's session log directories on this machine: its process and the engine processes
    it spawned share its stdout and stderr (logs/worker-<worker_id>-<job>-<pid>.out/.err)."""
    worker, pid = replica.get("worker_id"), replica.get("pid")
    paths = {p for d in log_dirs for p in [*Path(d).glob(f"worker-{worker}-*"), *Path(d).glob(f"worker-*-{pid}.*")]}
    return "\n".join(p.read_text(errors="replace") for p in sorted(paths) if p.suffix in {".out", ".err"})


def _api_replica_log(fetch: Fetch, replica: Mapping, tries: int) -> str:
    text = ""
    for suffix in ("out", "err"):
        query = urllib.parse.urlencode({"actor_id": replica["actor_id"], "suffix": suffix, "lines": -1})
        for attempt in range(tries):
            try:
                text += fetch(f"/api/v0/logs/file?{query}")
                break
            except (MetricsError, RuntimeError) as exc:
                if attempt == tries - 1:
                    who = replica.get("replica_id")
                    raise MetricsError(f"the {suffix} log of replica {who} not read: {exc}") from None
                time.sleep(2.0 * (attempt + 1))
    return text
