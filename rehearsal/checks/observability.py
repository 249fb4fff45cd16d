"""What can be seen of the running engines, checked on them:

- `--prometheus`: a real Prometheus (rehearsal/prometheus.py) scrapes the Ray metrics endpoints from the
  start of the checks, with the stack's rules; once the traffic has run, every panel query of the shipped
  dashboards (Grafana's variables substituted) and every rule expression is evaluated without error, the
  panels a healthy PD run must fill have data, and no alert fires;
- `make verify` (PD): the real command, against this endpoint, proves every request's KV moved (its figures
  printed); with `--prometheus` it reads that Prometheus, else Ray's endpoints;
- `--kv-fault`: last, an in-place change of prefill's block_size (a hybrid model's KV then cannot be read:
  vLLM 0.26 refuses a remote block size of its own for HMA) must make the NIXL alert fire and
  `make verify` fail with one line.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import subprocess
import sys
import time

from ray_llm_eks.domain.core.facts import PD_ROLES
from ray_llm_eks.domain.render import alert_rules, dashboards
from ray_llm_eks.domain.telemetry import alerts
from rehearsal import prometheus, ray_cluster, ray_token, substitute, topology
from rehearsal.checks import Check, by_flag
from rehearsal.context import Context, RehearsalFailed, say
from rehearsal.deploy import deploy
from rehearsal.prepare import rehearsed_settings
from rehearsal.processes import MARKER
from rehearsal.verify import application

# KV over UCX on loopback between two engines sharing 2 busy cores moves tens of MB per second of transfer time
# (docs/measurements.md, the dev rehearsal's make verify); the floor is well under it. The stack's own floor is
# for EFA between GPU nodes.
REHEARSAL_FLOOR_GBPS = 0.01
# Prefill and decode on one GPU read KV from each other's process over CUDA IPC: 66 MiB in 0.9 ms (77 GB/s) on an
# H100 with UCX's cuda_ipc GETs on, in 140 ms (0.5 GB/s, TCP over loopback) with UCX 1.21.0's default `auto`, which
# turns them off without NVLink (docs/measurements.md). Between the two: a GPU run whose KV fell back to TCP fails.
SHARED_GPU_FLOOR_GBPS = 5.0
WINDOW = "2m"  # the rate window the panel queries get (Grafana's $__rate_interval)
PANEL_RANGE, STEP = 300.0, 5.0  # the last 5 minutes, as a panel shows them: the run's traffic is in them
# The panels a healthy PD run must fill, by their first query (refId A; a later one may be a constant such as
# the floor line). The GPU panels need the DCGM exporter, absent here; the failure panels stay empty.
PD_PANELS = {
    "ray-serve-llm.json": (
        "Requests / s",
        "Prompt Tokens/s",
        "TTFT -- P50",
        "Cache Utilization",
        "Scheduler: Waiting",
        "NIXL: Transfer Latency",
        "NIXL: Transfer Throughput",
        "NIXL: Transfer Rate",
        "NIXL: Avg Post Time",
    ),
    "endpoint.json": (
        "Time to first token",
        "Inter-token latency",
        "End-to-end latency",
        "KV transfer throughput",
        "Decode prompt tokens by source",
        "Requests waiting",
        "KV cache in use",
        "Replicas per role",
        "Output tokens per second",
        dashboards.LOOP_LAG_PANEL,
        "Dollars per million output tokens",
    ),
}
FAULT_BLOCK_SIZE = 512  # prefill's, in place; decode keeps the 256 vLLM chose for the stand-in


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus", action="store_true", help="scrape with a real Prometheus, check every query")
    parser.add_argument(
        "--prometheus-wait", type=float, default=1800.0, help="how long to wait for the e2e build's Prometheus (s)"
    )
    parser.add_argument("--kv-fault", action="store_true", help="last, break the KV path in place (PD, hybrid)")


def _settings(ctx: Context):
    return rehearsed_settings(ctx.args.stack, ctx.args.set)


def floor_gbps(ctx: Context) -> float:
    """The KV throughput this run's PD path must reach: over CUDA IPC where both roles share a GPU, else loopback's."""
    if ctx.target != "gpu" or ctx.gpu is None or ctx.gpu.cpu_engines or ctx.gpu.here.efa:
        return REHEARSAL_FLOOR_GBPS
    devices = {role: {d for node in ctx.gpu.nodes if node.role == role for d in node.devices} for role in PD_ROLES}
    return SHARED_GPU_FLOOR_GBPS if set.intersection(*devices.values()) else REHEARSAL_FLOOR_GBPS


def _rule_inputs(ctx: Context) -> alerts.RuleInputs:
    stack_inputs = alert_rules.rule_inputs(_settings(ctx))
    floor = floor_gbps(ctx) * 1e9 if ctx.pd else None
    return dataclasses.replace(stack_inputs, pd=ctx.pd, kv_floor_bytes_per_s=floor)


def _start_prometheus(ctx: Context) -> None:
    executable = prometheus.binary(ctx.args.prometheus_wait, say)
    env = dict(os.environ, **{MARKER: ctx.run_id})
    spec = alerts.render(_rule_inputs(ctx))
    directory = ctx.run_dir / "prometheus"
    url, _ = prometheus.start(executable, directory, ctx.metrics_urls, spec, env)
    ctx.results["prometheus"] = url
    # A node started again (the head fault) may export on a new port: Prometheus is told, as service discovery would.
    ctx.results["retarget"] = lambda: prometheus.retarget(directory, ctx.metrics_urls)
    # The fault rehearsal's table names the alerts firing at the end of each fault window.
    ctx.results["alerts"] = lambda: prometheus.firing(url)
    rules = sum(len(g["rules"]) for g in spec["groups"])
    ctx.mark(
        f"Prometheus (the chart's v3.14.0) at {url}: scrapes {len(ctx.metrics_urls)} Ray endpoint(s), {rules} rules"
    )


def _verify_command(ctx: Context) -> list[str]:
    command = [sys.executable, "-m", "llmclient", "verify", ctx.url, "--stack", ctx.args.stack]
    command += ["--served-config", str(ctx.run_dir / "serve-config.yaml"), "--dashboard", ctx.dashboard]
    command += ["--floor-gbps", str(floor_gbps(ctx)), "--wait", "60"]
    # The engines' logs from their files here: the dashboard's log API reads a whole file within its own timeout,
    # which a loaded machine missed (the backend then read as none logged).
    command += [x for d in ctx.log_dirs for x in ("--log-dir", str(d))]
    # How long a count may trail its request here: Ray's export, plus its Prometheus's scrape where that is read.
    export_s = ray_cluster.METRICS_REPORT_INTERVAL_MS / 1000
    if url := ctx.results.get("prometheus"):
        return [*command, "--metrics-lag", str(export_s + prometheus.INTERVAL_MS / 1000), "--prometheus", url]
    return [*command, "--metrics-lag", str(export_s), *(x for u in ctx.metrics_urls for x in ("--metrics-url", u))]


def run_verify(ctx: Context) -> tuple[int, list[str]]:
    """`make verify` as a user runs it (the same entry point), against this endpoint: (exit code, lines)."""
    env = dict(os.environ, **ray_token.ENV, **({"OPENAI_API_KEY": ctx.api_key} if ctx.api_key else {}))
    done = subprocess.run(_verify_command(ctx), env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    for line in lines:
        say(f"  verify: {line}")
    return done.returncode, lines


def _verify(ctx: Context) -> None:
    code, lines = run_verify(ctx)
    if code != 0:
        raise RehearsalFailed(next((x for x in lines if x.startswith("VERIFY FAILED")), f"make verify exited {code}"))
    ctx.results["verify"] = lines
    ctx.timeline += [f"make verify: {line.strip()}" for line in lines if ":" in line and not line.startswith("sent")]
    ctx.mark("make verify passed: the KV path as its lines above say")


def _has_data(result: list[dict]) -> bool:
    return any(not math.isnan(float(v[1])) for r in result for v in r.get("values", []))


def _queries(ctx: Context) -> None:
    url = ctx.results["prometheus"]
    time.sleep(5)  # two scrapes and evaluations after the last requests
    shipped = dashboards.shipped_dashboards(_settings(ctx))
    queries = [q for name, text in shipped.items() for q in dashboards.panel_queries(name, json.loads(text), WINDOW)]
    errors, filled = [], set()
    for q in queries:
        try:
            # A range query, as a panel asks: vLLM's gauges exist only while its engine steps (Ray 2.58 drops
            # a gauge not set for two export intervals), so an instant query after the traffic misses them.
            if _has_data(prometheus.query_range(url, q.expr, PANEL_RANGE, STEP)) and q.ref == "A":
                filled.add((q.dashboard, q.panel))
        except prometheus.QueryError as exc:
            errors.append(f"{q.dashboard} panel {q.panel!r} {q.ref}: {exc}")
    spec = alerts.render(_rule_inputs(ctx))
    exprs = [r["expr"] for g in spec["groups"] for r in g["rules"]]
    for expr in exprs:
        try:
            prometheus.query(url, expr)
        except prometheus.QueryError as exc:
            errors.append(f"rule expression {expr[:80]!r}: {exc}")
    errors += [f"rule {r.get('name')}: {r.get('lastError')}" for r in prometheus.rules(url) if r.get("health") == "err"]
    if errors:
        raise RehearsalFailed(f"{len(errors)} quer(ies) failed on Prometheus; first: {errors[0]}")
    ctx.mark(
        f"Prometheus answered all {len(queries)} panel queries of {len(shipped)} dashboards and {len(exprs)} rule "
        "expressions without error"
    )
    panels = {(d, t) for d, titles in PD_PANELS.items() for t in titles} if ctx.pd else set()
    if ctx.pd and _rule_inputs(ctx).local_prefill_below is not None:
        panels.add((dashboards.ENDPOINT_FILE, dashboards.SELECTIVE_PD_PANEL))
    empty = sorted(f"{d}: {t}" for d, t in panels - filled)
    ctx.results["panels with data"] = sorted(f"{d}: {t}" for d, t in panels & filled)
    if empty:
        raise RehearsalFailed(f"PD panels without data after PD traffic: {'; '.join(empty)}")
    if panels:
        ctx.timeline.append(f"PD panels with data ({len(panels)}): " + ", ".join(t for _, t in sorted(panels)))
    if fired := prometheus.firing(url):
        raise RehearsalFailed(f"alerts firing in a healthy run: {', '.join(fired)}")
    ctx.timeline.append(f"Prometheus: {len(queries)} panel queries, {len(exprs)} rule expressions, no alert firing")


def _prepare_fault(local, args: argparse.Namespace) -> list[str]:
    if not local.pd or not local.hybrid:
        raise ValueError("--kv-fault: breaks a hybrid model's KV path (prefill/decode, Qwen3.5 family) only")
    return []


def _prefill_replicas(ctx: Context) -> tuple[str, set[str]]:
    """The app's status and its RUNNING prefill replicas, read now (a fault or a router switch before this
    check may have replaced those the rehearsal started with)."""
    app = application(ctx.dashboard, ctx.app)
    running = topology.running_replicas(app).get("prefill", [])
    return app.get("status", ""), {r["replica_id"] for r in running}


def _replaced(ctx: Context, before: set[str], cap: float) -> float:
    """Wait until Serve runs a prefill replica not in `before` and the app is RUNNING; seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < cap:
        status, replicas = _prefill_replicas(ctx)
        if status == "RUNNING" and replicas - before:
            return time.monotonic() - start
        time.sleep(3)
    raise RehearsalFailed(f"fault: the prefill replica was not replaced within {cap:g} s")


def _fault(ctx: Context) -> None:
    url = ctx.results.get("prometheus")
    doc = copy.deepcopy(ctx.document)

    def faulty_block_size(role: str, config: dict) -> object:
        """prefill's block_size FAULT_BLOCK_SIZE: what it was."""
        if role != "prefill":
            return None
        engine = config.setdefault("engine_kwargs", {})
        old = engine.get("block_size", "vLLM's")
        engine["block_size"] = FAULT_BLOCK_SIZE
        return old

    old = substitute.edit_roles(doc, "fault", faulty_block_size)["prefill"]
    _, before = _prefill_replicas(ctx)
    deploy(ctx.dashboard, doc)
    ctx.mark(f"fault: prefill block_size {old} -> {FAULT_BLOCK_SIZE}, in place (decode keeps its own)")
    took = _replaced(ctx, before, ctx.args.ready_timeout)
    ctx.mark(f"fault: a new prefill replica runs ({took:.0f} s after the change)")
    t0 = time.time()
    code, lines = run_verify(ctx)
    failed = [x for x in lines if x.startswith("VERIFY FAILED")]
    if code == 0 or len(failed) != 1:
        raise RehearsalFailed(f"fault: make verify should fail with one line; it exited {code}: {failed or lines[-1:]}")
    fired_after = None
    if url:
        while time.time() - t0 < 300:
            if (since := prometheus.active_since(url, "NixlTransferFailed")) is not None:
                fired_after = since - t0
                break
            time.sleep(2)
        if fired_after is None:
            raise RehearsalFailed("fault: NixlTransferFailed did not fire within 300 s of the broken requests")
        ctx.mark(f"fault: NixlTransferFailed firing since {fired_after:.0f} s after make verify's first request")
    ctx.timeline.append(
        f"fault (prefill block_size -> {FAULT_BLOCK_SIZE} in place): prefill replaced in {took:.0f} s; make verify: "
        f"{failed[0]}" + (f"; NixlTransferFailed fired after {fired_after:.0f} s" if fired_after is not None else "")
    )


PROMETHEUS = Check(
    "prometheus",
    _start_prometheus,
    selected=by_flag("prometheus"),
    options=_options,
)
# A failed verify (a slow KV lane, a missing figure) leaves the engines serving: the measurements after it still
# run, and the run fails at the end naming it.
VERIFY = Check("make verify", _verify, when=lambda ctx: ctx.pd, defer=True)
QUERIES = Check("dashboard and rule queries", _queries, selected=by_flag("prometheus"))
KV_FAULT = Check(
    "fault: KV path broken in place",
    _fault,
    # It proves make verify fails once the path breaks: only worth anything after a verify that passed.
    when=lambda ctx: ctx.pd and "verify" in ctx.results,
    selected=by_flag("kv_fault"),
    prepare=_prepare_fault,
)
