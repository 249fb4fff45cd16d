"""The rehearsal's observability checks, their pure parts: the Prometheus it starts, the panels a healthy PD
run must fill, the `make verify` command it runs, and the fault it injects. The checks themselves run on
real engines: `make rehearse STACK=dev ARGS="--prometheus --kv-fault"` (CI)."""

from __future__ import annotations

import argparse
import json
import threading
import time
from types import SimpleNamespace

import pytest

from go_binaries import build
from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.render import dashboards
from ray_llm_eks.domain.serving.serve_app import document_dict
from rehearsal import gpu, prometheus, ray_cluster, substitute
from rehearsal.checks import all_checks, observability
from rehearsal.context import RehearsalFailed
from tests.conftest import ROOT


def test_the_prometheus_scrapes_the_ray_endpoints_and_loads_the_rules(tmp_path):
    config = prometheus.config(prometheus.TARGETS_FILE, "rules.yaml")
    assert config["rule_files"] == ["rules.yaml"]
    (job,) = config["scrape_configs"]
    assert job["file_sd_configs"] == [{"files": ["targets.json"], "refresh_interval": prometheus.INTERVAL}]
    assert config["global"]["evaluation_interval"] == prometheus.INTERVAL
    prometheus.retarget(tmp_path, ["http://127.0.0.1:1234/metrics", "http://127.0.0.1:1235/metrics"])
    assert json.loads((tmp_path / "targets.json").read_text()) == [{"targets": ["127.0.0.1:1234", "127.0.0.1:1235"]}]


def test_each_run_starts_prometheus_on_an_empty_tsdb(tmp_path):
    wal = tmp_path / "data" / "wal"
    wal.mkdir(parents=True)
    (wal / "00000005").write_bytes(b"the last run's series")
    assert prometheus.fresh_storage(tmp_path) == tmp_path / "data"
    assert not (tmp_path / "data").exists()  # Prometheus creates it again, empty
    assert prometheus.fresh_storage(tmp_path) == tmp_path / "data"  # nothing there: fine too


def test_every_panel_that_must_have_data_exists_in_the_shipped_dashboards():
    shipped = dashboards.shipped_dashboards(stack.load_settings(stack.stack_file("dev", ROOT)))
    titles = {
        name: {q.panel for q in dashboards.panel_queries(name, json.loads(text))} for name, text in shipped.items()
    }
    missing = [f"{d}: {t}" for d, ts in observability.PD_PANELS.items() for t in ts if t not in titles.get(d, set())]
    assert missing == []


def test_the_docs_name_every_panel_that_must_have_data():
    text = " ".join((ROOT / "docs" / "observability.md").read_text().split())
    assert [t for ts in observability.PD_PANELS.values() for t in ts if f'"{t}"' not in text] == []


def test_verify_is_the_users_command_against_the_rehearsal(tmp_path):
    ctx = SimpleNamespace(
        url="http://127.0.0.1:8000",
        args=argparse.Namespace(stack="dev"),
        run_dir=tmp_path,
        dashboard="http://127.0.0.1:8265",
        results={"prometheus": "http://127.0.0.1:9090"},
        metrics_urls=["http://127.0.0.1:1/metrics"],
        log_dirs=[tmp_path / "head", tmp_path / "decode"],
        target="cpu",
        gpu=None,
    )
    command = observability._verify_command(ctx)
    assert command[1:5] == ["-m", "llmclient", "verify", "http://127.0.0.1:8000"]
    # The engines' logs from their files, every Ray node's (not through the dashboard's log API).
    flags = [command[i + 1] for i, x in enumerate(command) if x == "--log-dir"]
    assert flags == [str(tmp_path / "head"), str(tmp_path / "decode")]
    assert command[-2:] == ["--prometheus", "http://127.0.0.1:9090"]
    assert ["--served-config", str(tmp_path / "serve-config.yaml")] == command[7:9]
    # Counts trail the requests by the rehearsal's own export and scrape, not a cluster's 10 s and 30 s.
    export_s = ray_cluster.METRICS_REPORT_INTERVAL_MS / 1000
    assert verify_args(command).metrics_lag == export_s + prometheus.INTERVAL_MS / 1000
    ctx.results = {}
    assert observability._verify_command(ctx)[-2:] == ["--metrics-url", "http://127.0.0.1:1/metrics"]
    assert verify_args(observability._verify_command(ctx)).metrics_lag == export_s


def verify_args(command: list[str]) -> argparse.Namespace:
    """The verify command's arguments as `llmclient verify` reads them."""
    from llmclient import verify

    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    verify.add_arguments(parser)
    return parser.parse_args(command[4:])


def test_the_kv_floor_is_cuda_ipcs_where_prefill_and_decode_share_a_gpu():
    """On one GPU, KV over TCP (UCX's cuda_ipc GETs off) must fail verify; on the CPU, loopback's floor stays."""

    def floor(target: str, devices: dict[str, tuple[int, ...]], efa: bool = False) -> float:
        nodes = [gpu.NodeLayout(role, 1, d, {}, None) for role, d in devices.items()]
        here = gpu.GpuHere(count=2, name="NVIDIA H100 80GB HBM3", total_mib=81079, efa=efa, flashinfer=False)
        run = SimpleNamespace(here=here, nodes=nodes, cpu_engines=False)
        return observability.floor_gbps(SimpleNamespace(target=target, gpu=run if target == "gpu" else None))

    assert floor("gpu", {"prefill": (0,), "decode": (0,)}) == observability.SHARED_GPU_FLOOR_GBPS == 5.0
    assert floor("gpu", {"prefill": (0,), "decode": (1,)}) == observability.REHEARSAL_FLOOR_GBPS
    assert floor("gpu", {"prefill": (0,), "decode": (0,)}, efa=True) == observability.REHEARSAL_FLOOR_GBPS
    assert floor("cpu", {}) == observability.REHEARSAL_FLOOR_GBPS


def test_the_checks_run_in_their_order_and_the_fault_last():
    names = [c.name for c in all_checks()]
    assert names.index("prometheus") < names.index("smoke") < names.index("make verify")
    assert names.index("make verify") < names.index("dashboard and rule queries")
    assert names[-1] == "fault: KV path broken in place"


def test_a_failed_verify_still_lets_the_measurements_run_but_not_the_fault_that_needs_it_passed():
    assert observability.VERIFY.defer
    assert not observability.KV_FAULT.when(SimpleNamespace(pd=True, results={}))
    assert observability.KV_FAULT.when(SimpleNamespace(pd=True, results={"verify": ["verify passed"]}))


def test_the_fault_is_refused_where_it_would_not_break_the_kv_path():
    collocated = SimpleNamespace(pd=False, hybrid=True)
    with pytest.raises(ValueError, match="hybrid model's KV path"):
        observability._prepare_fault(collocated, argparse.Namespace())
    assert observability._prepare_fault(SimpleNamespace(pd=True, hybrid=True), argparse.Namespace()) == []
    assert "block-size-mismatch" in substitute.MUTATIONS  # the same mistake, made before deploy


def test_prometheus_times_are_read_to_the_microsecond_and_in_utc():
    assert prometheus._unix("1970-01-01T00:01:00.5Z") == 60.5
    assert prometheus._unix("2026-12-01T17:01:02.123456789Z") == pytest.approx(1796144462.123457)


def test_the_fault_table_names_the_alerts_firing_on_this_prometheus(monkeypatch, tmp_path):
    from rehearsal.checks import faults

    monkeypatch.setattr(prometheus, "binary", lambda wait, say: tmp_path / "prometheus")
    monkeypatch.setattr(prometheus, "start", lambda *args: ("http://127.0.0.1:9", None))
    monkeypatch.setattr(prometheus, "firing", lambda url: [f"NixlTransferFailed at {url}"])
    ctx = SimpleNamespace(
        args=argparse.Namespace(stack="dev", set=[], prometheus_wait=0.0),
        run_dir=tmp_path,
        run_id="test",
        metrics_urls=["http://127.0.0.1:1/metrics"],
        pd=True,
        target="cpu",
        gpu=None,
        results={},
        mark=lambda text: None,
    )
    observability._start_prometheus(ctx)
    assert faults._alerts(ctx) == ["NixlTransferFailed at http://127.0.0.1:9"]


@pytest.fixture
def idle_prometheus(tmp_path):
    """The built Prometheus with the dev stack's rules, scraping an address where nothing listens: the
    queries' own errors are real, and no panel can have data."""
    directory = build.component_dir(build.PROMETHEUS)
    if not (directory / ".built").is_file():
        pytest.skip(f"no Prometheus built under {directory}: `python3 -m go_binaries.build prometheus`")
    ctx = SimpleNamespace(args=argparse.Namespace(stack="dev", set=[]), pd=True, target="cpu", gpu=None, timeline=[],
                          mark=lambda text: None)  # fmt: skip
    rules = observability.alerts.render(observability._rule_inputs(ctx))
    url, process = prometheus.start(directory / "prometheus", tmp_path, ["http://127.0.0.1:9/metrics"], rules, {})
    ctx.results = {"prometheus": url}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(observability.time, "sleep", lambda seconds: None)  # the wait for the last scrapes
        yield ctx
    process.terminate()
    process.wait(30)


def test_a_node_started_on_a_new_port_is_scraped_there_once_retargeted(idle_prometheus, tmp_path):
    """The head fault can move the head's metrics port: the real Prometheus follows the targets file."""
    url = idle_prometheus.results["prometheus"]

    def scraped(expected: set[str]) -> set[str]:
        end = time.monotonic() + 30  # the file is read as Prometheus starts, and again on a change
        while (now := {t["labels"]["instance"] for t in prometheus.api(url, "/api/v1/targets")["activeTargets"]}) != (
            expected
        ) and time.monotonic() < end:
            threading.Event().wait(0.5)  # the fixture makes time.sleep a no-op
        return now

    assert scraped({"127.0.0.1:9"}) == {"127.0.0.1:9"}
    prometheus.retarget(tmp_path, ["http://127.0.0.1:9/metrics", "http://127.0.0.1:10/metrics"])
    assert scraped({"127.0.0.1:9", "127.0.0.1:10"}) == {"127.0.0.1:9", "127.0.0.1:10"}


def test_the_queries_check_fails_on_pd_panels_without_data(idle_prometheus):
    # Every panel query and rule expression parses and runs on the real Prometheus; then the panels fail.
    with pytest.raises(RehearsalFailed, match=r"PD panels without data after PD traffic: .*NIXL: Transfer Throughput"):
        observability._queries(idle_prometheus)


def test_with_selective_pd_its_panel_must_have_data_and_its_rule_runs(idle_prometheus):
    # The rule expressions with selectivePd (DecodeRecomputingPrompts less the local path's tokens) run too.
    idle_prometheus.args.set = ["selectivePd=28"]
    with pytest.raises(RehearsalFailed, match=r"PD panels without data .*: Selective PD: requests by path"):
        observability._queries(idle_prometheus)


def test_the_queries_check_fails_on_a_query_prometheus_refuses(idle_prometheus, monkeypatch):
    def with_a_broken_one(name, board, window="5m"):
        return [*panel_queries(name, board, window), dashboards.PanelQuery(name, "broken", "A", "rate(x[")]

    panel_queries = dashboards.panel_queries
    monkeypatch.setattr(dashboards, "panel_queries", with_a_broken_one)
    with pytest.raises(RehearsalFailed, match=r"quer\(ies\) failed on Prometheus; first: .* panel 'broken' A: .*parse"):
        observability._queries(idle_prometheus)


def test_the_fault_waits_for_a_prefill_replica_newer_than_those_running_when_it_starts(monkeypatch):
    # An earlier fault replaced the replica the rehearsal started with ("first") by "second": the broken
    # replica is the one after that, and make verify must not run before it serves.
    live = iter([{"second"}, {"second"}, {"second"}, {"third"}])
    calls = []

    def application(dashboard, app):
        replicas = [{"replica_id": r, "state": "RUNNING"} for r in next(live)]
        return {"status": "RUNNING", "deployments": {"Prefill:qwen": {"replicas": replicas}}}

    def verify(ctx):
        calls.append(sorted(next(live, {"none left"})))
        return 1, ["VERIFY FAILED: KV did not move for every request"]

    monkeypatch.setattr(observability, "application", application)
    monkeypatch.setattr(observability, "deploy", lambda dashboard, doc: None)
    monkeypatch.setattr(observability, "run_verify", verify)
    monkeypatch.setattr(observability.time, "sleep", lambda seconds: None)
    ctx = SimpleNamespace(
        document=document_dict(stack.load_settings(stack.stack_file("dev", ROOT)).serving.serve_document),
        running={"prefill": [{"replica_id": "first"}]},
        dashboard="http://127.0.0.1:8265",
        app="llm",
        args=argparse.Namespace(ready_timeout=60.0),
        results={},
        timeline=[],
        mark=lambda text: None,
    )
    observability._fault(ctx)
    assert calls == [["none left"]]  # verify ran once "third" was running, not before
