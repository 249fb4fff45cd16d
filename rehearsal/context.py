"""What every phase and check of one rehearsal shares: the clock and its timeline, the one failure type, and
the context a check receives (the deployed document, the endpoint and its key, metrics, dashboard, logs, the
running replicas). Pure Python: no Ray, no vLLM."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def say(text: str) -> None:
    print(text, flush=True)


class RehearsalFailed(RuntimeError):
    """A check or phase failed: one line of why (the engine's own error is printed after it from Ray's logs)."""


class Clock:
    def __init__(self):
        self.start = time.monotonic()
        self.events: list[tuple[float, str]] = []
        self.loads: list[float] = []  # 1-minute load average, sampled at each event and status poll

    def now(self) -> float:
        self.loads.append(os.getloadavg()[0])
        return time.monotonic() - self.start

    def mark(self, what: str) -> float:
        t = self.now()
        self.events.append((t, what))
        say(f"[{t:7.1f} s] {what}")
        return t


@dataclass
class Context:
    """Everything a check may read, and where it leaves what later checks and the timeline read.

    The well-known results have fields (the topology checks fill them); a new check keeps its own under
    `results[<its name>]` and adds its summary lines to `timeline`."""

    args: argparse.Namespace
    document: dict  # the serve config as deployed here (the keyed document after the substitutions)
    url: str  # the OpenAI endpoint, http://127.0.0.1:<port>
    api_key: str | None  # the run's key (None: the document checks no key)
    model: str  # the model id the endpoint serves
    pd: bool
    dashboard: str  # Ray dashboard (Serve REST API), http://127.0.0.1:<port>
    # Ray's Prometheus endpoint of each Ray node started so far, asked anew each time (Cluster.metrics_urls):
    # a node that starts later draws its port then
    metrics_endpoints: Callable[[], list[str]]
    log_dirs: list[Path]  # Ray's session logs, one directory per Ray node (the head's first)
    run_dir: Path  # files of this run that outlive it (serve config as deployed, bench JSON, ...)
    run_id: str  # every process of this rehearsal carries it (rehearsal.processes.MARKER)
    clock: Clock
    app: str  # the Serve application's name
    target: str = "cpu"  # "cpu" or "gpu"
    gpu: Any = None  # TARGET=gpu: rehearsal.prepare.GpuRun (this machine's GPUs, the emulated one, the layout)
    t_deploy: float = 0.0  # clock seconds when the serve config was submitted
    healthy: dict[str, float] = field(default_factory=dict)  # role -> clock seconds it turned HEALTHY
    replica_ready: dict[str, float] = field(default_factory=dict)  # replica id -> clock seconds RUNNING
    running: dict[str, list[dict]] = field(default_factory=dict)  # role -> RUNNING replicas (Serve REST API)
    served: dict[str, float] = field(default_factory=dict)  # replica id -> requests it served so far
    kv: tuple[dict, Any] = field(default_factory=lambda: ({}, {}))  # (prefill replica -> engine id, reads)
    first_token: float | None = None  # seconds to the streamed smoke's first token
    t_smoke: float | None = None  # clock seconds when the smoke passed
    results: dict[str, Any] = field(default_factory=dict)  # check name -> what it found
    timeline: list[str] = field(default_factory=list)  # lines a check adds to the closing timeline
    # The hops of each request since the last call, where a proxy of ours times them (plain vLLM's pd_proxy):
    # dicts of seconds since the request arrived (rehearsal/pd_proxy.py Hops); None under Ray.
    hops: Callable[[], list[dict]] | None = None
    # Each engine role's metric samples now, where the engines are not Ray's (plain vLLM: role -> its engines'
    # samples of the names asked); None under Ray (the Ray nodes' endpoints, roles from Serve's labels).
    role_metrics: Callable[[list[str]], dict[str, list]] | None = None

    @property
    def cpu_engines(self) -> bool:
        """The engines run on the CPU (the CPU target, or the GPU target's dry run with --cpu-engines)."""
        return self.target == "cpu" or bool(self.gpu and self.gpu.cpu_engines)

    @property
    def log_dir(self) -> Path:
        """The head node's logs (the Serve controller's, the ingress's; rehearsal.logs reads all of log_dirs)."""
        return self.log_dirs[0]

    @property
    def metrics_urls(self) -> list[str]:
        return self.metrics_endpoints()

    @property
    def metrics_url(self) -> str:
        """The head node's Prometheus endpoint (Serve's counters of every node are exported per node: sum
        over `metrics_urls` where replicas run on several nodes)."""
        return self.metrics_urls[0]

    def mark(self, what: str) -> float:
        return self.clock.mark(what)
